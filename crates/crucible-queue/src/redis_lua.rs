//! The Lua scripts of the Redis backend. Every state change of a task runs inside one script, so
//! it is atomic however many API servers and workers share the database.
//!
//! Keys (all under the prefix `P`, ARGV[1] of every script):
//! - `task:{id}` hash: the task (fields named as in `TaskRecord`, plus spec, token, entry, ...).
//! - `q:{priority}:{client}` stream with consumer group `workers`: one entry per claimable task.
//! - `prios` sorted set of priorities with undelivered entries; `depth:{priority}` hash
//!   client -> undelivered entries; `inflight` hash client -> running; `served` hash client ->
//!   serve sequence (fair share); `streams` set of every stream key.
//! - `leases`, `deadlines`, `finished` sorted sets of task ids by lease expiry, deadline and
//!   finish time; `batch:{id}` sorted set of task ids by submission sequence.
//! - `dedup` hash content -> leading task; `followers:{id}` list of tasks sharing it.
//! - `cache:{key}` string (result document), listed in the `cached` sorted set by time stored;
//!   `sweep` deletes it after the retention period (a Redis TTL of the same length backs that).
//! - `statecount`, `counters` hashes; `workers`, `worker_seen`, `restarts` hashes.

/// Helpers every script starts with.
const LIB: &str = r#"
local P = ARGV[1]
local function tkey(id) return P .. 'task:' .. id end
local function field(id, name) return redis.call('HGET', tkey(id), name) end
local function set_state(id, from, to)
  redis.call('HSET', tkey(id), 'state', to)
  redis.call('HINCRBY', P .. 'statecount', from, -1)
  redis.call('HINCRBY', P .. 'statecount', to, 1)
end
local function count(name, by)
  redis.call('HINCRBYFLOAT', P .. 'counters', name, by)
end
local function dec_depth(prio, client)
  local key = P .. 'depth:' .. prio
  local n = redis.call('HINCRBY', key, client, -1)
  if n <= 0 then
    redis.call('HDEL', key, client)
    if redis.call('HLEN', key) == 0 then redis.call('ZREM', P .. 'prios', prio) end
  end
end
-- Makes a task claimable: a new stream entry.
local function push(id)
  local t = redis.call('HMGET', tkey(id), 'priority', 'client')
  local s = P .. 'q:' .. t[1] .. ':' .. t[2]
  local entry = redis.call('XADD', s, '*', 'id', id)
  if redis.call('SADD', P .. 'streams', s) == 1 then
    redis.pcall('XGROUP', 'CREATE', s, 'workers', '0')
  end
  redis.call('HSET', tkey(id), 'entry', entry, 'stream', s)
  redis.call('HINCRBY', P .. 'depth:' .. t[1], t[2], 1)
  redis.call('ZADD', P .. 'prios', t[1], t[1])
end
-- Removes a queued task's undelivered entry.
local function unpush(id)
  local t = redis.call('HMGET', tkey(id), 'priority', 'client', 'entry', 'stream')
  if t[3] and t[3] ~= '' then
    redis.call('XDEL', t[4], t[3])
    dec_depth(t[1], t[2])
    redis.call('HSET', tkey(id), 'entry', '')
  end
end
-- Acknowledges a running task's delivered entry.
local function ack(id)
  local t = redis.call('HMGET', tkey(id), 'client', 'entry', 'stream')
  if t[2] and t[2] ~= '' then
    redis.call('XACK', t[3], 'workers', t[2])
    redis.call('XDEL', t[3], t[2])
    redis.call('HSET', tkey(id), 'entry', '')
  end
  redis.call('HINCRBY', P .. 'inflight', t[1], -1)
  redis.call('ZREM', P .. 'leases', id)
end
local function unfinished(state) return state == 'queued' or state == 'running' end
-- Makes a task terminal (the caller checked it was not).
local function finish(id, to, result, now)
  local t = redis.call('HMGET', tkey(id), 'state', 'shared_with', 'dedup')
  local leader = (not t[2]) or t[2] == ''
  if leader and t[1] == 'queued' then unpush(id) end
  if leader and t[1] == 'running' then ack(id) end
  set_state(id, t[1], to)
  redis.call('HSET', tkey(id), 'finished_at', now, 'token', '', 'lease_expires', '')
  if result and result ~= '' then redis.call('HSET', tkey(id), 'result', result) end
  redis.call('ZREM', P .. 'deadlines', id)
  redis.call('ZADD', P .. 'finished', now, id)
  if leader and t[3] and t[3] ~= '' and redis.call('HGET', P .. 'dedup', t[3]) == id then
    redis.call('HDEL', P .. 'dedup', t[3])
  end
end
local function waiting_followers(id)
  local out = {}
  for _, f in ipairs(redis.call('LRANGE', P .. 'followers:' .. id, 0, -1)) do
    if unfinished(field(f, 'state')) then table.insert(out, f) end
  end
  return out
end
-- Gives a leader's result to the tasks sharing it.
local function fill(id, result, verdict, now)
  local n = 0
  for _, f in ipairs(waiting_followers(id)) do
    finish(f, 'done', result, now)
    n = n + 1
  end
  redis.call('DEL', P .. 'followers:' .. id)
  if n > 0 then
    count('duplicates_shared', n)
    count('verdict:' .. verdict, n)
  end
  return n
end
-- A leader ended without a result to share: its first follower leads the others.
local function release(id)
  local waiting = waiting_followers(id)
  redis.call('DEL', P .. 'followers:' .. id)
  local first = waiting[1]
  if not first then return end
  set_state(first, field(first, 'state'), 'queued')
  redis.call('HSET', tkey(first), 'shared_with', '', 'started_at', '')
  local dedup = field(first, 'dedup')
  if dedup and dedup ~= '' then redis.call('HSET', P .. 'dedup', dedup, first) end
  push(first)
  for i = 2, #waiting do
    local f = waiting[i]
    set_state(f, field(f, 'state'), 'queued')
    redis.call('HSET', tkey(f), 'shared_with', first)
    redis.call('RPUSH', P .. 'followers:' .. first, f)
  end
end
-- Followers show their leader's queued/running state.
local function mirror(id, to, now)
  for _, f in ipairs(waiting_followers(id)) do
    set_state(f, field(f, 'state'), to)
    redis.call('HSET', tkey(f), 'started_at', now)
  end
end
local function holds(id, token)
  local t = redis.call('HMGET', tkey(id), 'state', 'token')
  return t[1] == 'running' and token ~= '' and t[2] == token
end
"#;

/// ARGV: P, now, batch, then 9 per task: id, task_name, client, priority, spec, labels, dedup
/// ('' = no sharing), deadline_at ('' = none), cache keys joined by ','.
const SUBMIT: &str = r#"
local now, batch = ARGV[2], ARGV[3]
for i = 4, #ARGV, 9 do
  local id, dedup, deadline, keys = ARGV[i], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8]
  local seq = redis.call('INCR', P .. 'seq')
  redis.call('HSET', tkey(id), 'id', id, 'batch', batch, 'state', 'queued',
    'task_name', ARGV[i + 1], 'client', ARGV[i + 2], 'priority', ARGV[i + 3],
    'spec', ARGV[i + 4], 'labels', ARGV[i + 5], 'dedup', dedup, 'submitted_at', now,
    'deadline_at', deadline, 'attempts', 0, 'cached', 0, 'shared_with', '', 'entry', '',
    'seq', seq)
  redis.call('HINCRBY', P .. 'statecount', 'queued', 1)
  if batch ~= '' then redis.call('ZADD', P .. 'batch:' .. batch, seq, id) end
  if deadline ~= '' then redis.call('ZADD', P .. 'deadlines', deadline, id) end
  local answered = false
  for key in string.gmatch(keys, '[^,]+') do
    local doc = redis.call('GET', P .. 'cache:' .. key)
    if doc and not answered then
      finish(id, 'done', doc, now)
      redis.call('HSET', tkey(id), 'cached', 1)
      count('cache_hits', 1)
      local ok, parsed = pcall(cjson.decode, doc)
      local verdict = (ok and type(parsed) == 'table' and parsed.verdict) or 'unknown'
      count('verdict:' .. tostring(verdict), 1)
      answered = true
    end
  end
  if not answered and dedup ~= '' then
    local leader = redis.call('HGET', P .. 'dedup', dedup)
    local state = leader and field(leader, 'state')
    if leader and unfinished(state) then
      redis.call('HSET', tkey(id), 'shared_with', leader)
      redis.call('RPUSH', P .. 'followers:' .. leader, id)
      set_state(id, 'queued', state)
      answered = true
    else
      redis.call('HSET', P .. 'dedup', dedup, id)
    end
  end
  if not answered then push(id) end
end
return 1
"#;

/// ARGV: P, worker, token, now, lease_expires, versions. Returns {id, spec, attempts,
/// deadline_at} or false when nothing is claimable.
const CLAIM: &str = r#"
local worker, token, now, expires, versions = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
for _ = 1, 1000 do
  local top = redis.call('ZREVRANGE', P .. 'prios', 0, 0)
  if #top == 0 then return false end
  local prio = top[1]
  local depth = redis.call('HGETALL', P .. 'depth:' .. prio)
  local best, best_running, best_served
  for i = 1, #depth, 2 do
    local client = depth[i]
    if tonumber(depth[i + 1]) > 0 then
      local running = tonumber(redis.call('HGET', P .. 'inflight', client) or '0')
      local served = tonumber(redis.call('HGET', P .. 'served', client) or '0')
      if best == nil or running < best_running
          or (running == best_running and (served < best_served
            or (served == best_served and client < best))) then
        best, best_running, best_served = client, running, served
      end
    end
  end
  if best == nil then
    redis.call('DEL', P .. 'depth:' .. prio)
    redis.call('ZREM', P .. 'prios', prio)
  else
    local s = P .. 'q:' .. prio .. ':' .. best
    local read = redis.call('XREADGROUP', 'GROUP', 'workers', worker, 'COUNT', 1, 'STREAMS', s, '>')
    local entry = read and read[1][2][1]
    if not entry then
      -- The count drifted from the stream: trust the stream.
      redis.call('HSET', P .. 'depth:' .. prio, best, 1)
      dec_depth(prio, best)
    else
      dec_depth(prio, best)
      local eid, id = entry[1], entry[2][2]
      local t = redis.call('HMGET', tkey(id), 'state', 'entry', 'attempts', 'spec', 'deadline_at')
      if t[1] == 'queued' and t[2] == eid then
        set_state(id, 'queued', 'running')
        local attempts = tonumber(t[3]) + 1
        redis.call('HSET', tkey(id), 'started_at', now, 'attempts', attempts, 'worker', worker,
          'token', token, 'lease_expires', expires, 'versions', versions)
        redis.call('ZADD', P .. 'leases', expires, id)
        redis.call('HINCRBY', P .. 'inflight', best, 1)
        redis.call('HSET', P .. 'served', best, redis.call('INCR', P .. 'serve_seq'))
        mirror(id, 'running', now)
        return {id, t[4], tostring(attempts), t[5] or ''}
      end
      -- An entry whose task ended or moved on: drop it.
      redis.call('XACK', s, 'workers', eid)
      redis.call('XDEL', s, eid)
    end
  end
end
return false
"#;

/// ARGV: P, id, token, lease_expires. Returns 1 when renewed.
const RENEW: &str = r#"
local id, token, expires = ARGV[2], ARGV[3], ARGV[4]
if not holds(id, token) then return 0 end
redis.call('HSET', tkey(id), 'lease_expires', expires)
redis.call('ZADD', P .. 'leases', expires, id)
local t = redis.call('HMGET', tkey(id), 'stream', 'entry', 'worker')
if t[2] and t[2] ~= '' then
  -- Resets the entry's idle time in the pending list (what XAUTOCLAIM looks at).
  redis.call('XCLAIM', t[1], 'workers', t[3], 0, t[2], 'JUSTID')
end
return 1
"#;

/// ARGV: P, id, token, now, result, verdict, cache key ('' = do not cache), cache ttl seconds,
/// evaluated ('1' counts an evaluation and its stages; '0' = answered from the cache), then
/// stage name / seconds pairs.
const COMPLETE: &str = r#"
local id, token, now, result, verdict = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local key, ttl, evaluated = ARGV[7], ARGV[8], ARGV[9]
if not holds(id, token) then return 0 end
finish(id, 'done', result, now)
count('verdict:' .. verdict, 1)
if evaluated == '1' then
  count('evaluations', 1)
  for i = 10, #ARGV, 2 do
    count('stage_sum:' .. ARGV[i], ARGV[i + 1])
    count('stage_count:' .. ARGV[i], 1)
  end
else
  redis.call('HSET', tkey(id), 'cached', 1)
  redis.call('HINCRBY', tkey(id), 'attempts', -1)
  count('cache_hits', 1)
end
if key ~= '' then
  redis.call('SET', P .. 'cache:' .. key, result, 'EX', ttl)
  redis.call('ZADD', P .. 'cached', now, key)
end
if verdict == 'infra_error' then release(id) else fill(id, result, verdict, now) end
return 1
"#;

/// ARGV: P, id, token, now, max_attempts, expired_only ('1': only if the lease expired by now).
/// Returns 'requeued', 'exhausted' (nothing changed: the caller writes the infra_error result)
/// or 'refused'.
const REQUEUE: &str = r#"
local id, token, now, max_attempts, expired_only = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if not holds(id, token) then return 'refused' end
local t = redis.call('HMGET', tkey(id), 'attempts', 'lease_expires')
if expired_only == '1' and tonumber(t[2]) > tonumber(now) then return 'refused' end
if tonumber(t[1]) >= tonumber(max_attempts) then return 'exhausted' end
ack(id)
set_state(id, 'running', 'queued')
redis.call('HSET', tkey(id), 'token', '', 'lease_expires', '')
push(id)
mirror(id, 'queued', now)
return 'requeued'
"#;

/// Ends an unfinished task without an evaluation's result (cancel, timeout, infra_error).
/// ARGV: P, id, token ('' = whoever holds it), now, state, result ('' = none), verdict ('' = do
/// not count). Returns 1 when it ended the task.
const FINISH: &str = r#"
local id, token, now, to, result, verdict = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local t = redis.call('HMGET', tkey(id), 'state', 'shared_with')
if not unfinished(t[1]) then return 0 end
if token ~= '' and not holds(id, token) then return 0 end
finish(id, to, result, now)
if verdict ~= '' then count('verdict:' .. verdict, 1) end
if (not t[2]) or t[2] == '' then release(id) end
return 1
"#;

/// Cancels every unfinished task listed, in order (as FINISH with no token and no result).
/// ARGV: P, now, ids... Returns how many it ended.
const CANCEL_MANY: &str = r#"
local now, n = ARGV[2], 0
for i = 3, #ARGV do
  local id = ARGV[i]
  -- Read again for each: cancelling a leader may have handed its followers to a later one.
  local t = redis.call('HMGET', tkey(id), 'state', 'shared_with')
  if unfinished(t[1]) then
    finish(id, 'cancelled', nil, now)
    if (not t[2]) or t[2] == '' then release(id) end
    n = n + 1
  end
end
return n
"#;

/// Deletes finished tasks. ARGV: P, ids...
const PURGE: &str = r#"
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local batch = field(id, 'batch')
  if batch and batch ~= '' then redis.call('ZREM', P .. 'batch:' .. batch, id) end
  local state = field(id, 'state')
  if state then redis.call('HINCRBY', P .. 'statecount', state, -1) end
  n = n + redis.call('DEL', tkey(id))
  redis.call('DEL', P .. 'followers:' .. id)
  redis.call('ZREM', P .. 'finished', id)
end
return n
"#;

/// Drops a pending-list entry whose task no longer runs under it. ARGV: P, stream, entry, id.
const DROP_ORPHAN: &str = r#"
local s, eid, id = ARGV[2], ARGV[3], ARGV[4]
local t = redis.call('HMGET', tkey(id), 'state', 'entry')
if t[1] == 'running' and t[2] == eid then return 0 end
redis.call('XACK', s, 'workers', eid)
redis.call('XDEL', s, eid)
return 1
"#;

/// The scripts, compiled once per store handle.
pub(crate) struct Scripts {
    pub submit: redis::Script,
    pub claim: redis::Script,
    pub renew: redis::Script,
    pub complete: redis::Script,
    pub requeue: redis::Script,
    pub finish: redis::Script,
    pub cancel_many: redis::Script,
    pub purge: redis::Script,
    pub drop_orphan: redis::Script,
}

impl Scripts {
    pub fn new() -> Scripts {
        let script = |body: &str| redis::Script::new(&format!("{LIB}\n{body}"));
        Scripts {
            submit: script(SUBMIT),
            claim: script(CLAIM),
            renew: script(RENEW),
            complete: script(COMPLETE),
            requeue: script(REQUEUE),
            finish: script(FINISH),
            cancel_many: script(CANCEL_MANY),
            purge: script(PURGE),
            drop_orphan: script(DROP_ORPHAN),
        }
    }
}
