// CUPTI activity buffers handled in C, for scripts/probe/cupti_gil.py: the buffer callbacks never
// take Python's GIL. CUPTI calls them from its flush and from its own worker thread; a callback
// written with ctypes takes the GIL there, and a thread holding the GIL in a kernel launch can
// then wait on CUPTI for ever (the hang design-notes.md records, 2026-12-04).
//
// Build: gcc -O2 -shared -fPIC -o cupti_shim.so cupti_shim.c -ldl -lpthread
// Use: shim_init(path of libcupti), shim_enable(kind), shim_disable(kind), shim_flush(),
// shim_take(out, max) copies out the records gathered so far (kind, start, end, name).
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUptiResult;
typedef void (*requested_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*completed_fn)(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid);

static CUptiResult (*register_callbacks)(requested_fn, completed_fn);
static CUptiResult (*next_record)(uint8_t *, size_t, void **);
static CUptiResult (*enable)(int);
static CUptiResult (*disable)(int);
static CUptiResult (*flush_all)(uint32_t);

enum { KERNEL = 10, BUFFER_BYTES = 4 << 20, NAME_BYTES = 256 };
// Offsets in CUDA 13's CUpti_ActivityKernel10 (and every kernel record since CUDA 11).
enum { START_AT = 16, END_AT = 24, NAME_AT = 104 };

typedef struct {
    uint32_t kind;
    uint64_t start, end;
    char name[NAME_BYTES];
} shim_record;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static shim_record *records;
static size_t count, capacity;
static uint64_t buffers_completed, buffers_completed_off_caller;
static pthread_t flushing_thread;

static void on_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *raw = NULL;
    if (posix_memalign(&raw, 8, BUFFER_BYTES) != 0) raw = NULL;
    *buffer = raw;
    *size = raw ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void keep(const uint8_t *record) {
    if (count == capacity) {
        size_t grown = capacity ? capacity * 2 : 4096;
        shim_record *bigger = realloc(records, grown * sizeof *records);
        if (!bigger) return;
        records = bigger;
        capacity = grown;
    }
    shim_record *r = &records[count++];
    memcpy(&r->kind, record, sizeof r->kind);
    memcpy(&r->start, record + START_AT, sizeof r->start);
    memcpy(&r->end, record + END_AT, sizeof r->end);
    const char *name = NULL;
    memcpy(&name, record + NAME_AT, sizeof name);
    strncpy(r->name, name ? name : "?", NAME_BYTES - 1);
    r->name[NAME_BYTES - 1] = 0;
}

static void on_completed(void *context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)context, (void)stream, (void)size;
    void *record = NULL;
    pthread_mutex_lock(&lock);
    buffers_completed++;
    if (!pthread_equal(pthread_self(), flushing_thread)) buffers_completed_off_caller++;
    while (next_record(buffer, valid, &record) == 0) {
        uint32_t kind;
        memcpy(&kind, record, sizeof kind);
        if (kind == KERNEL) keep(record);
    }
    pthread_mutex_unlock(&lock);
    free(buffer);
}

int shim_init(const char *cupti_path) {
    void *lib = dlopen(cupti_path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return -1;
    register_callbacks = (CUptiResult(*)(requested_fn, completed_fn))dlsym(lib, "cuptiActivityRegisterCallbacks");
    next_record = (CUptiResult(*)(uint8_t *, size_t, void **))dlsym(lib, "cuptiActivityGetNextRecord");
    enable = (CUptiResult(*)(int))dlsym(lib, "cuptiActivityEnable");
    disable = (CUptiResult(*)(int))dlsym(lib, "cuptiActivityDisable");
    flush_all = (CUptiResult(*)(uint32_t))dlsym(lib, "cuptiActivityFlushAll");
    if (!register_callbacks || !next_record || !enable || !disable || !flush_all) return -2;
    return register_callbacks(on_requested, on_completed);
}

int shim_enable(int kind) { return enable(kind); }
int shim_disable(int kind) { return disable(kind); }

int shim_flush(void) {
    pthread_mutex_lock(&lock);  // read by the callbacks, under the same lock
    flushing_thread = pthread_self();
    pthread_mutex_unlock(&lock);
    return flush_all(1);  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: partly filled buffers too
}

// Copies up to `max` gathered records into `out` and forgets them; returns how many.
size_t shim_take(shim_record *out, size_t max) {
    pthread_mutex_lock(&lock);
    size_t n = count < max ? count : max;
    memcpy(out, records, n * sizeof *records);
    memmove(records, records + n, (count - n) * sizeof *records);
    count -= n;
    pthread_mutex_unlock(&lock);
    return n;
}

// How many buffers CUPTI handed back, and how many of them on a thread other than the last one
// that flushed (its worker thread, or another caller's).
void shim_counts(uint64_t *completed, uint64_t *off_caller) {
    pthread_mutex_lock(&lock);
    *completed = buffers_completed;
    *off_caller = buffers_completed_off_caller;
    pthread_mutex_unlock(&lock);
}
