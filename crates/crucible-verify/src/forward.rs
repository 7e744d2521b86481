//! The forward path: every host function that can run when `ModelNew` is called, found by
//! following calls from `ModelNew.forward` (and `__call__`) through helper functions, methods,
//! `self.<submodule>(...)`, containers of submodules (`nn.Sequential`, `nn.ModuleList`,
//! `nn.ModuleDict`, lists and tuples, as `attrs` reads them), stored functions,
//! `autograd.Function.apply` and custom ops. Each function is walked once in statement order
//! with a light local inference (is this value a tensor, a layer, a kernel, a shape?),
//! recording the calls, tensor operators, kernel launches, `try` blocks and cache lookups that
//! the forward-path rules judge, and whether some call could not be resolved.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, CmpOp, Expr, Operator, Stmt, UnaryOp};
use ruff_text_size::{Ranged, TextRange};

use crate::kernel;
use crate::semantic::{
    ClassId, FuncId, Kind, MAX_DEPTH, Semantic, Target, for_each_block, self_attr, self_param,
    torch_result_kind,
};
use crate::torch_api::{
    ALLOWED_METHODS, COMPUTE_METHODS, IDENTITY, PERSISTENT, SHAPE, TENSOR_ATTRS, listed,
    method_result,
};

/// At most this many functions are followed from `forward`.
const MAX_FUNCS: usize = 512;

/// A value as far as the walk knows it.
#[derive(Clone, Debug)]
pub(crate) struct Val {
    pub kind: Kind,
    /// [`IDENTITY`], [`SHAPE`] and [`PERSISTENT`] bits.
    pub taint: u8,
}

impl Val {
    fn of(kind: Kind) -> Val {
        Val { kind, taint: 0 }
    }

    fn unknown() -> Val {
        Val::of(Kind::Unknown)
    }

    fn is_tensor(&self) -> bool {
        self.kind == Kind::Tensor
    }
}

/// What a call in the forward path calls.
pub(crate) enum Callee<'a> {
    /// A function reached through the imports: `torch.matmul`, `F.relu`, `math.sqrt`.
    Qual(String),
    /// A method of a value that is not a module, a class or a local instance: `x.sum()`.
    Method { name: &'a str, recv: Kind },
    /// A `torch.nn` layer instance being run, described for the message.
    Layer(String),
}

pub(crate) struct CallSite<'a> {
    pub call: &'a ast::ExprCall,
    pub func: FuncId,
    pub callee: Callee<'a>,
}

/// An operator applied to a tensor in the forward path (`a @ b`, `x * 2`, `y += b`).
pub(crate) struct TensorOp {
    pub range: TextRange,
    pub func: FuncId,
    pub what: String,
}

/// A lookup or store keyed by a tensor's identity or shape in state that outlives the call.
pub(crate) struct CacheUse {
    pub range: TextRange,
    pub func: FuncId,
    pub taint: u8,
    pub container: String,
}

/// A comparison of a tainted key with `self.<slot>` / a global, kept if the slot is written
/// somewhere in the forward path.
struct PendingCompare {
    use_: CacheUse,
    slot: Slot,
}

#[derive(PartialEq)]
enum Slot {
    Attr(String),
    Global(String),
}

#[derive(Default)]
pub(crate) struct Forward<'a> {
    /// `ModelNew.forward`, when it exists.
    pub root: Option<FuncId>,
    /// Every function on the path, in discovery order, and who reached it first.
    pub funcs: Vec<FuncId>,
    pub parent: Vec<Option<FuncId>>,
    pub calls: Vec<CallSite<'a>>,
    pub ops: Vec<TensorOp>,
    /// Kernels launched as `kernel[grid](...)` (with repeats).
    pub launched: Vec<FuncId>,
    /// Functions that contain a launch.
    pub launch_funcs: Vec<FuncId>,
    /// Kernels referred to in any way on the path.
    pub kernel_refs: Vec<FuncId>,
    /// A `something[grid](...)` call whose `something` could not be resolved (a kernel passed
    /// as an argument, say): every referred kernel then counts as launched.
    pub unresolved_launch: bool,
    /// A call on the path whose callee could not be resolved (a value from an argument, an
    /// attribute nothing in the module assigns, `getattr(...)`, a container of unknown
    /// contents): it may run any code of the module, so every kernel the host code refers to
    /// may be launched. The judge's run-time `no-triton-launch` check decides those.
    pub unresolved_call: bool,
    /// Kernels referred to anywhere in host code; filled only when `unresolved_call` is set.
    pub host_kernel_refs: Vec<FuncId>,
    /// Classes whose `apply` is called (`torch.autograd.Function`s).
    pub autograd_classes: Vec<ClassId>,
    /// Kernels the `backward` of those classes refers to: used, though not on the forward path.
    pub backward_kernels: Vec<FuncId>,
    pub tries: Vec<(&'a ast::StmtTry, FuncId)>,
    pub withs: Vec<(&'a ast::WithItem, FuncId)>,
    pub caches: Vec<CacheUse>,
    pending: Vec<PendingCompare>,
    written_slots: Vec<Slot>,
    pub too_deep: bool,
}

impl<'a> Forward<'a> {
    pub(crate) fn build(sem: &Semantic<'a>) -> Forward<'a> {
        let mut out = Forward::default();
        let Target::Class(model) = sem.model_new else {
            return out;
        };
        out.root = sem.find_method(model, "forward");
        for root in [out.root, sem.find_method(model, "__call__")]
            .into_iter()
            .flatten()
        {
            if !sem.funcs[root].kernel && !out.funcs.contains(&root) {
                out.funcs.push(root);
                out.parent.push(None);
            }
        }
        let mut i = 0;
        while i < out.funcs.len() {
            let func = out.funcs[i];
            Walker::new(sem, &mut out, func).run();
            i += 1;
        }
        if out.unresolved_launch {
            // A kernel launched through a parameter (`launch(self.kernel, x)`): count the
            // kernels `ModelNew` refers to anywhere, `__init__` included.
            for class in sem.class_chain(model) {
                for &m in &sem.classes[class].methods {
                    let refs = kernel::referenced_kernels(sem, &sem.funcs[m].def.body);
                    out.kernel_refs.extend(refs);
                }
            }
        }
        if out.unresolved_call {
            host_kernel_refs(sem, &sem.module.body, &mut out.host_kernel_refs, 0);
        }
        for &class in &out.autograd_classes {
            if let Some(backward) = sem.find_method(class, "backward") {
                let refs = kernel::referenced_kernels(sem, &sem.funcs[backward].def.body);
                out.backward_kernels.extend(refs);
            }
        }
        let pending = std::mem::take(&mut out.pending);
        for p in pending {
            if out.written_slots.contains(&p.slot) {
                out.caches.push(p.use_);
            }
        }
        out
    }

    /// Whether the kernel is launched on the path (directly or, failing resolution, referred to).
    pub(crate) fn launches(&self, kernel: FuncId) -> bool {
        self.launched.contains(&kernel)
            || (self.unresolved_launch && self.kernel_refs.contains(&kernel))
            || (self.unresolved_call && self.host_kernel_refs.contains(&kernel))
    }

    /// `ModelNew.forward` for the root, `helper (called from ModelNew.forward)` otherwise.
    pub(crate) fn describe(&self, sem: &Semantic<'_>, func: FuncId) -> String {
        let label = sem.func_label(func);
        let parent = self
            .funcs
            .iter()
            .position(|&f| f == func)
            .and_then(|i| self.parent[i]);
        match parent {
            Some(p) => format!("`{label}` (called from `{}`)", sem.func_label(p)),
            None => format!("`{label}`"),
        }
    }
}

/// The kernels that host code refers to (kernel bodies, which refer to device functions, left
/// out).
fn host_kernel_refs(sem: &Semantic<'_>, body: &[Stmt], out: &mut Vec<FuncId>, depth: u32) {
    if depth > MAX_DEPTH {
        return;
    }
    for stmt in body {
        match stmt {
            Stmt::FunctionDef(def)
                if sem
                    .funcs
                    .iter()
                    .any(|f| f.kernel && std::ptr::eq(f.def, def)) => {}
            Stmt::FunctionDef(def) => out.extend(kernel::referenced_kernels(sem, &def.body)),
            // Module and class level blocks may hold kernel definitions: look inside them.
            Stmt::ClassDef(_)
            | Stmt::If(_)
            | Stmt::For(_)
            | Stmt::While(_)
            | Stmt::With(_)
            | Stmt::Try(_)
            | Stmt::Match(_) => {
                for_each_block(stmt, |b| host_kernel_refs(sem, b, out, depth + 1));
            }
            _ => out.extend(kernel::referenced_kernels(sem, std::slice::from_ref(stmt))),
        }
    }
}

struct Walker<'s, 'a> {
    sem: &'s Semantic<'a>,
    out: &'s mut Forward<'a>,
    func: FuncId,
    class: Option<ClassId>,
    this: Option<&'a str>,
    env: Vec<(&'a str, Val)>,
    globals: Vec<&'a str>,
    depth: u32,
}

impl<'s, 'a> Walker<'s, 'a> {
    fn new(sem: &'s Semantic<'a>, out: &'s mut Forward<'a>, func: FuncId) -> Self {
        let f = &sem.funcs[func];
        let this = f.class.and_then(|_| self_param(f.def));
        Walker {
            sem,
            out,
            func,
            class: f.class,
            this,
            env: Vec::new(),
            globals: Vec::new(),
            depth: 0,
        }
    }

    fn run(&mut self) {
        let def = self.sem.funcs[self.func].def;
        self.bind_params(&def.parameters);
        self.stmts(&def.body);
    }

    fn bind_params(&mut self, params: &'a ast::Parameters) {
        let with_default = params
            .posonlyargs
            .iter()
            .chain(&params.args)
            .chain(&params.kwonlyargs);
        for p in with_default {
            let name = p.parameter.name.id.as_str();
            if Some(name) == self.this {
                continue;
            }
            let mut val = Val::of(self.annotation_kind(p.parameter.annotation.as_deref()));
            if let Some(default) = &p.default
                && self.sem.is_dict_constructor(default)
            {
                val = Val {
                    kind: Kind::Dict,
                    taint: PERSISTENT,
                };
            }
            self.env.push((name, val));
        }
        for p in params.vararg.iter().chain(&params.kwarg) {
            self.env.push((p.name.id.as_str(), Val::unknown()));
        }
    }

    /// `Tensor` for `torch.Tensor`, `Optional[torch.Tensor]`, `torch.Tensor | None`.
    fn annotation_kind(&self, ann: Option<&Expr>) -> Kind {
        let Some(ann) = ann else {
            return Kind::Unknown;
        };
        let is_tensor = |e: &Expr| {
            self.sem
                .qualname(e)
                .is_some_and(|q| q == "torch.Tensor" || q == "torch.FloatTensor")
                || matches!(e, Expr::StringLiteral(s) if s.value.to_str().ends_with("Tensor"))
        };
        let tensor = match ann {
            Expr::Subscript(s) => is_tensor(&s.slice),
            Expr::BinOp(b) => is_tensor(&b.left) || is_tensor(&b.right),
            other => is_tensor(other),
        };
        if tensor { Kind::Tensor } else { Kind::Unknown }
    }

    fn lookup(&self, name: &str) -> Option<&Val> {
        self.env
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    fn enqueue(&mut self, f: FuncId) {
        if self.sem.funcs[f].kernel {
            self.out.kernel_refs.push(f);
        } else if !self.out.funcs.contains(&f) && self.out.funcs.len() < MAX_FUNCS {
            self.out.funcs.push(f);
            self.out.parent.push(Some(self.func));
        }
    }

    /// Enqueues what calling an instance of `class` runs: its `forward` or `__call__`. A class
    /// that defines neither runs what a base class outside the module defines: a PyTorch layer's
    /// `forward` for a `torch.nn` layer, code the verifier cannot see for anything else.
    fn run_instance(&mut self, c: &'a ast::ExprCall, class: ClassId, what: &str) {
        let mut found = false;
        for name in ["forward", "__call__"] {
            if let Some(m) = self.sem.find_method(class, name) {
                self.enqueue(m);
                found = true;
            }
        }
        if found {
            return;
        }
        for k in self.sem.class_chain(class) {
            for base in self.sem.classes[k].def.bases() {
                if matches!(base, Expr::Name(n) if self.sem.module_class(n.id.as_str()).is_some()) {
                    continue;
                }
                match self.sem.qualname(base) {
                    Some(q) if q == "torch.nn.Module" || q == "object" => {}
                    Some(q) if matches!(torch_result_kind(&q), Kind::Layer(_)) => {
                        let short = q.strip_prefix("torch.").unwrap_or(&q);
                        self.record(c, Callee::Layer(format!("`{what}` ({short})")));
                    }
                    _ => self.out.unresolved_call = true,
                }
            }
        }
    }

    fn func_return_kind(&self, f: FuncId) -> Kind {
        self.annotation_kind(self.sem.funcs[f].def.returns.as_deref())
    }

    // ---------------------------------------------------------------- statements

    fn stmts(&mut self, body: &'a [Stmt]) {
        for stmt in body {
            self.stmt(stmt);
        }
    }

    fn stmt(&mut self, stmt: &'a Stmt) {
        if self.depth > MAX_DEPTH {
            self.out.too_deep = true;
            return;
        }
        self.depth += 1;
        match stmt {
            Stmt::Assign(a) => self.assign(&a.targets, &a.value),
            Stmt::AnnAssign(a) => {
                if let Some(value) = &a.value {
                    self.assign(std::slice::from_ref(&*a.target), value);
                }
            }
            Stmt::AugAssign(a) => {
                let target = self.expr(&a.target);
                let value = self.expr(&a.value);
                if a.op == Operator::MatMult || target.is_tensor() || value.is_tensor() {
                    self.op(a.range, format!("in-place `{}=`", a.op.as_str()));
                }
                if let Expr::Name(n) = &*a.target {
                    let kind = if target.is_tensor() || value.is_tensor() {
                        Kind::Tensor
                    } else {
                        target.kind
                    };
                    let taint = target.taint | value.taint;
                    self.env.push((n.id.as_str(), Val { kind, taint }));
                } else {
                    self.note_write(&a.target);
                }
            }
            Stmt::Expr(e) => {
                self.expr(&e.value);
            }
            Stmt::Return(r) => {
                if let Some(v) = &r.value {
                    self.expr(v);
                }
            }
            Stmt::If(s) => {
                self.expr(&s.test);
                self.stmts(&s.body);
                for clause in &s.elif_else_clauses {
                    if let Some(test) = &clause.test {
                        self.expr(test);
                    }
                    self.stmts(&clause.body);
                }
            }
            Stmt::For(s) => {
                let elem = self.iter_elem(&s.iter);
                self.bind(&s.target, &elem);
                self.stmts(&s.body);
                self.stmts(&s.orelse);
            }
            Stmt::While(s) => {
                self.expr(&s.test);
                self.stmts(&s.body);
                self.stmts(&s.orelse);
            }
            Stmt::With(s) => {
                for item in &s.items {
                    self.out.withs.push((item, self.func));
                    self.expr(&item.context_expr);
                    if let Some(vars) = &item.optional_vars {
                        self.bind(vars, &Val::unknown());
                    }
                }
                self.stmts(&s.body);
            }
            Stmt::Try(s) => {
                self.out.tries.push((s, self.func));
                self.stmts(&s.body);
                for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                    if let Some(t) = &h.type_ {
                        self.expr(t);
                    }
                    if let Some(name) = &h.name {
                        self.env.push((name.id.as_str(), Val::unknown()));
                    }
                    self.stmts(&h.body);
                }
                self.stmts(&s.orelse);
                self.stmts(&s.finalbody);
            }
            Stmt::FunctionDef(def) => {
                for d in &def.decorator_list {
                    self.expr(&d.expression);
                }
                let mark = self.env.len();
                self.bind_params(&def.parameters);
                self.stmts(&def.body);
                self.env.truncate(mark);
                self.env.push((def.name.id.as_str(), Val::unknown()));
            }
            Stmt::ClassDef(def) => {
                let mark = self.env.len();
                self.stmts(&def.body);
                self.env.truncate(mark);
            }
            Stmt::Global(g) => self.globals.extend(g.names.iter().map(|n| n.id.as_str())),
            Stmt::Delete(d) => {
                for t in &d.targets {
                    self.expr(t);
                }
            }
            Stmt::Import(_) | Stmt::ImportFrom(_) => {}
            other => {
                let mut fwd = Fwd { w: self, taint: 0 };
                visitor::walk_stmt(&mut fwd, other);
            }
        }
        self.depth -= 1;
    }

    fn assign(&mut self, targets: &'a [Expr], value: &'a Expr) {
        // `a, b = x, y`: bind element by element.
        if let [Expr::Tuple(t)] = targets
            && let Expr::Tuple(v) = value
            && t.elts.len() == v.elts.len()
        {
            for (target, value) in t.elts.iter().zip(&v.elts) {
                let val = self.expr(value);
                self.bind(target, &val);
            }
            return;
        }
        let val = self.expr(value);
        for target in targets {
            self.bind(target, &val);
        }
    }

    fn bind(&mut self, target: &'a Expr, val: &Val) {
        match target {
            Expr::Name(n) => {
                let id = n.id.as_str();
                if self.globals.contains(&id) {
                    self.out.written_slots.push(Slot::Global(id.to_string()));
                }
                self.env.push((id, val.clone()));
            }
            Expr::Tuple(t) => self.bind_elems(&t.elts, val),
            Expr::List(l) => self.bind_elems(&l.elts, val),
            Expr::Starred(s) => self.bind(&s.value, &Val::unknown()),
            Expr::Attribute(_) | Expr::Subscript(_) => {
                self.expr(target);
                self.note_write(target);
            }
            _ => {}
        }
    }

    fn bind_elems(&mut self, elts: &'a [Expr], val: &Val) {
        let elem = Val {
            kind: match &val.kind {
                Kind::Other => Kind::Other,
                Kind::List(inner) => (**inner).clone(),
                _ => Kind::Unknown,
            },
            taint: val.taint,
        };
        for e in elts {
            self.bind(e, &elem);
        }
    }

    /// Records a write to `self.X` (state that outlives the call).
    fn note_write(&mut self, target: &'a Expr) {
        if let Some(this) = self.this
            && let Some(attr) = self_attr(target, this)
        {
            self.out.written_slots.push(Slot::Attr(attr.to_string()));
        }
    }

    /// The kind of the elements of an iterable (`for x in <iter>`).
    fn iter_elem(&mut self, iter: &'a Expr) -> Val {
        if let Expr::Call(call) = iter
            && let Expr::Name(n) = &*call.func
            && self.lookup(n.id.as_str()).is_none()
            && !self.sem.is_bound(n.id.as_str())
            && call.arguments.keywords.is_empty()
        {
            match (n.id.as_str(), &*call.arguments.args) {
                ("enumerate", [arg]) => {
                    let inner = self.iter_elem(arg);
                    return Val::of(Kind::List(Box::new(inner.kind)));
                }
                ("reversed", [arg]) => return self.iter_elem(arg),
                // `zip(self.layers, self.norms)`: each name may be any of the elements.
                ("zip", args) if !args.is_empty() => {
                    let mut joined = Kind::OneOf(Vec::new());
                    for arg in args {
                        joined = joined.join(self.iter_elem(arg).kind);
                    }
                    return Val::of(Kind::List(Box::new(joined)));
                }
                _ => {}
            }
        }
        let v = self.expr(iter);
        match v.kind {
            Kind::List(inner) => Val {
                kind: *inner,
                taint: v.taint,
            },
            other => Val::of(other.elem()),
        }
    }

    // ---------------------------------------------------------------- expressions

    fn op(&mut self, range: TextRange, what: String) {
        self.out.ops.push(TensorOp {
            range,
            func: self.func,
            what,
        });
    }

    fn expr(&mut self, e: &'a Expr) -> Val {
        if self.depth > MAX_DEPTH {
            self.out.too_deep = true;
            return Val::unknown();
        }
        self.depth += 1;
        let v = self.expr_inner(e);
        self.depth -= 1;
        v
    }

    fn expr_inner(&mut self, e: &'a Expr) -> Val {
        match e {
            Expr::Name(n) => self.name(n.id.as_str()),
            Expr::Attribute(a) => self.attribute(e, a),
            Expr::Call(c) => self.call(c),
            Expr::Subscript(s) => {
                let v = self.expr(&s.value);
                let k = self.expr(&s.slice);
                self.cache_lookup(&s.value, &k, s.range);
                match v.kind {
                    Kind::Tensor => Val::of(Kind::Tensor),
                    Kind::Other => Val {
                        kind: Kind::Other,
                        taint: v.taint,
                    },
                    // `self.layers[1:]` is a container again.
                    kind @ Kind::List(_) if matches!(&*s.slice, Expr::Slice(_)) => Val::of(kind),
                    kind @ (Kind::List(_) | Kind::OneOf(_) | Kind::Layer(_)) => {
                        Val::of(kind.elem())
                    }
                    _ => Val::unknown(),
                }
            }
            Expr::BinOp(b) => {
                let l = self.expr(&b.left);
                let r = self.expr(&b.right);
                let formatting =
                    b.op == Operator::Mod && matches!(&*b.left, Expr::StringLiteral(_));
                let tensor = l.is_tensor() || r.is_tensor();
                if b.op == Operator::MatMult {
                    self.op(b.range, "the `@` (matrix multiply) operator".to_string());
                } else if tensor && !formatting {
                    self.op(b.range, format!("`{}` on a tensor", b.op.as_str()));
                }
                let kind = if tensor || b.op == Operator::MatMult {
                    Kind::Tensor
                } else if l.kind == Kind::Other && r.kind == Kind::Other {
                    Kind::Other
                } else {
                    Kind::Unknown
                };
                Val {
                    kind,
                    taint: l.taint | r.taint,
                }
            }
            Expr::UnaryOp(u) => {
                let v = self.expr(&u.operand);
                if v.is_tensor() && matches!(u.op, UnaryOp::USub | UnaryOp::Invert) {
                    self.op(u.range, format!("unary `{}` on a tensor", u.op.as_str()));
                }
                if u.op == UnaryOp::Not {
                    Val::of(Kind::Other)
                } else {
                    v
                }
            }
            Expr::Compare(c) => self.compare(c),
            Expr::BoolOp(b) => {
                let mut out: Option<Val> = None;
                for v in &b.values {
                    let v = self.expr(v);
                    out = Some(match out {
                        Some(prev) => merge(prev, v),
                        None => v,
                    });
                }
                out.unwrap_or_else(Val::unknown)
            }
            Expr::If(i) => {
                self.expr(&i.test);
                let body = self.expr(&i.body);
                let orelse = self.expr(&i.orelse);
                merge(body, orelse)
            }
            Expr::Named(n) => {
                let v = self.expr(&n.value);
                self.bind(&n.target, &v);
                v
            }
            Expr::Lambda(l) => {
                let mark = self.env.len();
                if let Some(params) = &l.parameters {
                    self.bind_params(params);
                }
                self.expr(&l.body);
                self.env.truncate(mark);
                Val::unknown()
            }
            Expr::Tuple(t) => self.sequence(&t.elts),
            Expr::List(l) => self.sequence(&l.elts),
            Expr::Set(s) => {
                let v = self.sequence(&s.elts);
                Val {
                    kind: Kind::Other,
                    taint: v.taint,
                }
            }
            Expr::Dict(d) => {
                for item in &d.items {
                    if let Some(k) = &item.key {
                        self.expr(k);
                    }
                    self.expr(&item.value);
                }
                Val::of(Kind::Dict)
            }
            Expr::ListComp(l) => {
                let elt = self.comprehension(&l.generators, &l.elt);
                Val::of(Kind::List(Box::new(elt.kind)))
            }
            Expr::SetComp(s) => {
                self.comprehension(&s.generators, &s.elt);
                Val::of(Kind::Other)
            }
            Expr::Generator(g) => {
                let elt = self.comprehension(&g.generators, &g.elt);
                Val::of(Kind::List(Box::new(elt.kind)))
            }
            Expr::DictComp(d) => {
                let mark = self.env.len();
                self.generators(&d.generators);
                if let Some(k) = &d.key {
                    self.expr(k);
                }
                self.expr(&d.value);
                self.env.truncate(mark);
                Val::of(Kind::Dict)
            }
            Expr::Starred(s) => self.expr(&s.value),
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::BytesLiteral(_)
            | Expr::BooleanLiteral(_)
            | Expr::NoneLiteral(_)
            | Expr::EllipsisLiteral(_) => Val::of(Kind::Other),
            other => {
                // f-strings, slices, await, yield: visit the children, keep their taint.
                let mut fwd = Fwd { w: self, taint: 0 };
                visitor::walk_expr(&mut fwd, other);
                Val {
                    kind: Kind::Other,
                    taint: fwd.taint,
                }
            }
        }
    }

    fn sequence(&mut self, elts: &'a [Expr]) -> Val {
        let mut taint = 0;
        let mut all_other = true;
        let mut elems: Option<Kind> = None;
        for e in elts {
            let v = match e {
                // `[*self.blocks, self.head]`
                Expr::Starred(s) => {
                    let v = self.expr(&s.value);
                    Val {
                        kind: v.kind.elem(),
                        taint: v.taint,
                    }
                }
                other => self.expr(other),
            };
            taint |= v.taint;
            all_other &= v.kind == Kind::Other;
            // The first element says what the elements are, unless they are modules or
            // functions: a call through an element may then run any of them.
            elems = Some(match elems {
                None => v.kind,
                Some(prev) if prev.runs_code() || v.kind.runs_code() => prev.join(v.kind),
                Some(prev) => prev,
            });
        }
        let kind = if all_other {
            Kind::Other
        } else {
            Kind::List(Box::new(elems.unwrap_or(Kind::Unknown)))
        };
        Val { kind, taint }
    }

    fn generators(&mut self, generators: &'a [ast::Comprehension]) {
        for g in generators {
            let elem = self.iter_elem(&g.iter);
            self.bind(&g.target, &elem);
            for cond in &g.ifs {
                self.expr(cond);
            }
        }
    }

    fn comprehension(&mut self, generators: &'a [ast::Comprehension], elt: &'a Expr) -> Val {
        let mark = self.env.len();
        self.generators(generators);
        let v = self.expr(elt);
        self.env.truncate(mark);
        v
    }

    fn name(&mut self, id: &'a str) -> Val {
        if let Some(v) = self.lookup(id) {
            return v.clone();
        }
        if Some(id) == self.this
            && let Some(class) = self.class
        {
            return Val::of(Kind::Instance(class));
        }
        let kind = self.sem.name_kind(id);
        match kind {
            Kind::Kernel(k) => self.out.kernel_refs.push(k),
            Kind::Func(f) => self.enqueue(f),
            _ => {}
        }
        Val::of(kind)
    }

    fn attribute(&mut self, e: &'a Expr, a: &'a ast::ExprAttribute) -> Val {
        let attr = a.attr.id.as_str();
        if let Some(this) = self.this
            && let Some(class) = self.class
            && matches!(&*a.value, Expr::Name(n) if n.id.as_str() == this)
            && self.lookup(this).is_none()
        {
            return self.member(class, attr);
        }
        if self.is_module_ref(e)
            && let Some(q) = self.sem.qualname(e)
        {
            return Val::of(Kind::Qual(q));
        }
        let v = self.expr(&a.value);
        self.attr_of(v, attr)
    }

    /// `.attr` of a value.
    fn attr_of(&mut self, v: Val, attr: &str) -> Val {
        match v.kind {
            Kind::OneOf(members) if !members.is_empty() => {
                let mut out: Option<Val> = None;
                for member in members {
                    let val = self.attr_of(Val::of(member), attr);
                    out = Some(match out {
                        Some(prev) => merge(prev, val),
                        None => val,
                    });
                }
                out.unwrap_or_else(Val::unknown)
            }
            Kind::Tensor => {
                if TENSOR_ATTRS.contains(&attr) {
                    Val::of(Kind::Tensor)
                } else if attr == "shape" {
                    Val {
                        kind: Kind::Other,
                        taint: v.taint | SHAPE,
                    }
                } else {
                    Val::of(Kind::Other)
                }
            }
            Kind::Layer(_) => {
                if attr.contains("weight") || attr.contains("bias") || attr.starts_with("running_")
                {
                    Val::of(Kind::Tensor)
                } else {
                    Val::of(Kind::Other)
                }
            }
            Kind::Instance(c) | Kind::Class(c) => self.member(c, attr),
            Kind::Qual(q) => Val::of(Kind::Qual(format!("{q}.{attr}"))),
            Kind::Other => v,
            _ if attr == "shape" => Val {
                kind: Kind::Other,
                taint: SHAPE,
            },
            _ => Val::unknown(),
        }
    }

    /// Whether the root name of an attribute chain is an import rather than a local variable.
    fn is_module_ref(&self, e: &Expr) -> bool {
        let mut e = e;
        loop {
            match e {
                Expr::Attribute(a) => e = &a.value,
                Expr::Name(n) => return self.lookup(n.id.as_str()).is_none(),
                _ => return false,
            }
        }
    }

    /// `self.attr` (or `Class.attr`) on an instance of `class`: a method, a kernel or an attribute.
    fn member(&mut self, class: ClassId, attr: &str) -> Val {
        if let Some(m) = self.sem.find_method(class, attr) {
            if self.sem.funcs[m].kernel {
                self.out.kernel_refs.push(m);
                return Val::of(Kind::Kernel(m));
            }
            self.enqueue(m);
            return Val::of(Kind::Func(m));
        }
        let kind = self.sem.attr_kind(class, attr);
        match kind {
            Kind::Kernel(k) => self.out.kernel_refs.push(k),
            Kind::Func(f) => self.enqueue(f),
            _ => {}
        }
        Val::of(kind)
    }

    fn compare(&mut self, c: &'a ast::ExprCompare) -> Val {
        let mut exprs: Vec<&'a Expr> = Vec::with_capacity(c.comparators.len() + 1);
        exprs.push(&c.left);
        exprs.extend(c.comparators.iter());
        let vals: Vec<Val> = exprs.iter().map(|e| self.expr(e)).collect();
        let mut tensor = false;
        for (i, op) in c.ops.iter().enumerate() {
            let (l, r) = (&vals[i], &vals[i + 1]);
            let (le, re) = (exprs[i], exprs[i + 1]);
            match op {
                CmpOp::In | CmpOp::NotIn => {
                    self.cache_lookup(re, l, c.range);
                }
                CmpOp::Is | CmpOp::IsNot => {
                    self.state_compare(le, l, re, r, c.range);
                }
                _ => {
                    if matches!(op, CmpOp::Eq | CmpOp::NotEq) {
                        self.state_compare(le, l, re, r, c.range);
                    }
                    if l.is_tensor() || r.is_tensor() {
                        tensor = true;
                        self.op(c.range, format!("comparison `{}` on a tensor", op.as_str()));
                    }
                }
            }
        }
        Val::of(if tensor { Kind::Tensor } else { Kind::Other })
    }

    /// A key compared with `self.X` or a declared global: a cache if the slot is written on
    /// the forward path.
    fn state_compare(&mut self, le: &'a Expr, l: &Val, re: &'a Expr, r: &Val, range: TextRange) {
        for (slot_expr, key) in [(le, r), (re, l)] {
            let taint = key.taint & (IDENTITY | SHAPE);
            if taint == 0 {
                continue;
            }
            let slot = match slot_expr {
                Expr::Name(n) if self.globals.contains(&n.id.as_str()) => {
                    Slot::Global(n.id.to_string())
                }
                other => match self.this.and_then(|this| self_attr(other, this)) {
                    Some(attr) => Slot::Attr(attr.to_string()),
                    None => continue,
                },
            };
            let container = match &slot {
                Slot::Attr(a) => format!("`self.{a}`"),
                Slot::Global(g) => format!("the global `{g}`"),
            };
            self.out.pending.push(PendingCompare {
                use_: CacheUse {
                    range,
                    func: self.func,
                    taint,
                    container,
                },
                slot,
            });
        }
    }

    /// A description of `e` when it is a dict that outlives the call.
    fn persistent_dict(&self, e: &Expr) -> Option<String> {
        match e {
            Expr::Name(n) => {
                let id = n.id.as_str();
                match self.lookup(id) {
                    Some(v) => (v.kind == Kind::Dict && v.taint & PERSISTENT != 0)
                        .then(|| format!("the default-argument dict `{id}`")),
                    None => (self.sem.is_dict_global(id) || self.globals.contains(&id))
                        .then(|| format!("the module-level dict `{id}`")),
                }
            }
            Expr::Attribute(a) => {
                let attr = a.attr.id.as_str();
                let owner = match &*a.value {
                    Expr::Name(n) if Some(n.id.as_str()) == self.this => self.class,
                    Expr::Name(n) => self.sem.module_class(n.id.as_str()),
                    _ => None,
                }?;
                (self.sem.attr_kind(owner, attr) == Kind::Dict)
                    .then(|| format!("the dict attribute `{attr}`"))
            }
            _ => None,
        }
    }

    /// `container[key]`, `key in container`, `container.get(key)`.
    fn cache_lookup(&mut self, container: &'a Expr, key: &Val, range: TextRange) {
        let taint = key.taint & (IDENTITY | SHAPE) | if key.is_tensor() { IDENTITY } else { 0 };
        if taint == 0 {
            return;
        }
        if let Some(container) = self.persistent_dict(container) {
            self.out.caches.push(CacheUse {
                range,
                func: self.func,
                taint,
                container,
            });
        }
    }

    // ---------------------------------------------------------------- calls

    fn args(&mut self, call: &'a ast::ExprCall) -> (u8, Vec<Val>) {
        let mut taint = 0;
        let mut vals = Vec::with_capacity(call.arguments.args.len());
        for arg in &call.arguments.args {
            let v = self.expr(arg);
            taint |= v.taint;
            vals.push(v);
        }
        for kw in &call.arguments.keywords {
            taint |= self.expr(&kw.value).taint;
        }
        (taint, vals)
    }

    fn record(&mut self, call: &'a ast::ExprCall, callee: Callee<'a>) {
        self.out.calls.push(CallSite {
            call,
            func: self.func,
            callee,
        });
    }

    fn call(&mut self, c: &'a ast::ExprCall) -> Val {
        match &*c.func {
            Expr::Subscript(sub) => self.launch(c, sub),
            Expr::Name(n) => {
                let id = n.id.as_str();
                if let Some(v) = self.lookup(id) {
                    let kind = v.kind.clone();
                    return self.call_value(c, kind, id);
                }
                if let Some(f) = self.sem.module_func(id) {
                    self.enqueue(f);
                    self.args(c);
                    return Val::of(self.func_return_kind(f));
                }
                if let Some(class) = self.sem.module_class(id) {
                    if let Some(init) = self.sem.find_method(class, "__init__") {
                        self.enqueue(init);
                    }
                    self.args(c);
                    return Val::of(Kind::Instance(class));
                }
                if id == "Model" {
                    // The reference model (imported, or expected to be in scope): PyTorch.
                    self.args(c);
                    return Val::of(Kind::Layer("Model".to_string()));
                }
                if let Some(q) = self.sem.qualname(&c.func) {
                    return self.qual_call(c, q);
                }
                if !is_builtin(id)
                    && let Some(q) = self.sem.star_qual(id)
                {
                    return self.qual_call(c, q);
                }
                let (taint, vals) = self.args(c);
                match id {
                    "id" | "hash" => Val {
                        kind: Kind::Other,
                        taint: taint | IDENTITY,
                    },
                    "len" | "int" | "float" | "tuple" | "list" | "str" | "min" | "max" | "abs"
                    | "round" | "range" | "bool" | "sorted" | "divmod" | "pow" => {
                        let kind = if id == "list" || id == "tuple" {
                            vals.first()
                                .map(|v| match &v.kind {
                                    Kind::List(_) => v.kind.clone(),
                                    _ => Kind::Other,
                                })
                                .unwrap_or(Kind::Other)
                        } else {
                            Kind::Other
                        };
                        Val { kind, taint }
                    }
                    "isinstance" | "callable" | "hasattr" | "print" | "repr" | "format" => {
                        Val::of(Kind::Other)
                    }
                    _ => {
                        if !runs_no_module_code(id) {
                            // `map(layer, xs)`, a name bound somewhere the verifier does not look.
                            self.out.unresolved_call = true;
                        }
                        Val::unknown()
                    }
                }
            }
            Expr::Attribute(a) => self.method_call(c, a),
            other => {
                let v = self.expr(other);
                self.call_value(c, v.kind, "the called value")
            }
        }
    }

    /// `kernel[grid](...)`, or `self.layers[i](...)` / `self.heads[name](...)`.
    fn launch(&mut self, c: &'a ast::ExprCall, sub: &'a ast::ExprSubscript) -> Val {
        let before = self.out.kernel_refs.len();
        let v = self.expr(&sub.value);
        self.expr(&sub.slice);
        let mut launched: Vec<FuncId> = self.out.kernel_refs[before..].to_vec();
        if launched.is_empty() {
            // `self.kernels[i][grid](...)`: one of the kernels of a list.
            match &v.kind {
                Kind::Kernel(k) => launched.push(*k),
                Kind::OneOf(members) if members.iter().all(|m| matches!(m, Kind::Kernel(_))) => {
                    launched.extend(members.iter().filter_map(|m| match m {
                        Kind::Kernel(k) => Some(*k),
                        _ => None,
                    }));
                }
                _ => {}
            }
        }
        if launched.is_empty() {
            match v.kind {
                // An element of a container of modules, called.
                kind @ (Kind::List(_) | Kind::OneOf(_) | Kind::Layer(_)) => {
                    let elem = if matches!(&*sub.slice, Expr::Slice(_)) {
                        kind
                    } else {
                        kind.elem()
                    };
                    let what = match &*sub.value {
                        Expr::Attribute(a) => format!("self.{}[...]", a.attr.id),
                        _ => "an element".to_string(),
                    };
                    return self.call_value(c, elem, &what);
                }
                Kind::Tensor | Kind::Other => {}
                // A function looked up in a dict: anything.
                Kind::Dict => self.out.unresolved_call = true,
                _ => {
                    self.out.unresolved_launch = true;
                    self.out.unresolved_call = true;
                }
            }
        } else {
            self.out.launched.extend(launched);
            self.out.launch_funcs.push(self.func);
        }
        self.args(c);
        Val::unknown()
    }

    /// Calling a value of a known kind: a layer, a local instance, a function, a class.
    fn call_value(&mut self, c: &'a ast::ExprCall, kind: Kind, what: &str) -> Val {
        if let Kind::Qual(q) = kind {
            return self.qual_call(c, q);
        }
        let kind = self.invoke(c, kind, what);
        self.args(c);
        Val::of(kind)
    }

    /// Records what calling a value of `kind` runs (its arguments aside) and returns the kind of
    /// the result.
    fn invoke(&mut self, c: &'a ast::ExprCall, kind: Kind, what: &str) -> Kind {
        match kind {
            Kind::Layer(q) => {
                let short = q.strip_prefix("torch.").unwrap_or(&q);
                self.record(c, Callee::Layer(format!("`{what}` ({short})")));
                Kind::Tensor
            }
            Kind::Instance(class) => {
                self.run_instance(c, class, what);
                Kind::Unknown
            }
            // Calling an `nn.Sequential` runs each of its modules; an element of a list runs
            // what the element is.
            Kind::List(inner) => self.invoke(c, *inner, what),
            Kind::OneOf(members) => {
                if members.is_empty() {
                    self.out.unresolved_call = true;
                }
                let mut result: Option<Kind> = None;
                for member in members {
                    let kind = self.invoke(c, member, what);
                    result = Some(match result {
                        Some(prev) if prev != kind => Kind::Unknown,
                        _ => kind,
                    });
                }
                result.unwrap_or(Kind::Unknown)
            }
            Kind::Func(f) => {
                self.enqueue(f);
                self.func_return_kind(f)
            }
            Kind::Class(class) => {
                if let Some(init) = self.sem.find_method(class, "__init__") {
                    self.enqueue(init);
                }
                Kind::Instance(class)
            }
            Kind::Qual(q) => {
                let kind = torch_result_kind(&q);
                self.record(c, Callee::Qual(q));
                kind
            }
            // Calling a tensor, a number or a kernel without a grid launches nothing (it fails).
            Kind::Tensor | Kind::Other | Kind::Kernel(_) => Kind::Unknown,
            Kind::Unknown | Kind::Dict => {
                self.out.unresolved_call = true;
                Kind::Unknown
            }
        }
    }

    fn qual_call(&mut self, c: &'a ast::ExprCall, q: String) -> Val {
        if let Some(op) = q.strip_prefix("torch.ops.")
            && let Some(f) = self.sem.custom_op(op)
        {
            self.enqueue(f);
            self.args(c);
            return Val::of(Kind::Tensor);
        }
        let (taint, vals) = self.args(c);
        for v in vals {
            match v.kind {
                // `checkpoint(self.block, x)`, `torch.func.functional_call(self.block, ...)`: the
                // library calls the module.
                Kind::Instance(class) => self.run_instance(c, class, "a module passed on"),
                // A library function given a kernel may launch it.
                Kind::Kernel(_) => self.out.unresolved_launch = true,
                _ => {}
            }
        }
        let kind = torch_result_kind(&q);
        let taint = if kind == Kind::Tensor { 0 } else { taint };
        self.record(c, Callee::Qual(q));
        Val { kind, taint }
    }

    fn method_call(&mut self, c: &'a ast::ExprCall, a: &'a ast::ExprAttribute) -> Val {
        let attr = a.attr.id.as_str();
        // super().method(...)
        if let Expr::Call(inner) = &*a.value
            && matches!(&*inner.func, Expr::Name(n) if n.id.as_str() == "super")
        {
            if let Some(class) = self.class {
                let chain = self.sem.class_chain(class);
                if let Some(m) = chain[1..]
                    .iter()
                    .find_map(|&b| self.sem.find_method(b, attr))
                {
                    self.enqueue(m);
                } else if attr != "__init__" {
                    // A method of a base class outside the module.
                    self.out.unresolved_call = true;
                }
            }
            self.args(c);
            return Val::unknown();
        }
        if self.is_module_ref(&c.func)
            && let Some(q) = self.sem.qualname(&c.func)
        {
            return self.qual_call(c, q);
        }
        let recv = self.expr(&a.value);
        match recv.kind {
            Kind::Class(class) | Kind::Instance(class) => {
                if attr == "apply"
                    && matches!(recv.kind, Kind::Class(_))
                    && let Some(fwd) = self.sem.find_method(class, "forward")
                {
                    // `torch.autograd.Function.apply` runs `forward`.
                    self.enqueue(fwd);
                    self.out.autograd_classes.push(class);
                    self.args(c);
                    return Val::of(Kind::Tensor);
                }
                let member = self.member(class, attr);
                if member.kind == Kind::Unknown && NN_MODULE_METHODS.contains(&attr) {
                    // `self.parameters()`, `self.children()`: `nn.Module` plumbing.
                    self.args(c);
                    return Val::unknown();
                }
                let is_self =
                    matches!(&*a.value, Expr::Name(n) if Some(n.id.as_str()) == self.this);
                let what = if is_self {
                    format!("self.{attr}")
                } else {
                    format!(".{attr}")
                };
                self.call_value(c, member.kind, &what)
            }
            Kind::OneOf(members) => {
                self.method_on_members(c, attr, members);
                self.args(c);
                Val::unknown()
            }
            Kind::List(inner) if matches!(attr, "forward" | "__call__") => {
                let what = format!(".{attr}");
                self.call_value(c, Kind::List(inner), &what)
            }
            Kind::Layer(q) => {
                if matches!(attr, "forward" | "__call__" | "_conv_forward") {
                    let short = q.strip_prefix("torch.").unwrap_or(&q).to_string();
                    self.record(c, Callee::Layer(format!("`.{attr}` of a {short}")));
                    self.args(c);
                    Val::of(Kind::Tensor)
                } else {
                    self.args(c);
                    Val::unknown()
                }
            }
            Kind::Qual(q) => self.qual_call(c, format!("{q}.{attr}")),
            Kind::Kernel(k) if attr == "run" => {
                // `kernel.run(..., grid=...)`: the launch `kernel[grid](...)` makes.
                self.out.launched.push(k);
                self.out.launch_funcs.push(self.func);
                self.args(c);
                Val::unknown()
            }
            Kind::Func(_) | Kind::Kernel(_) => {
                self.args(c);
                Val::unknown()
            }
            kind => {
                if kind == Kind::Unknown && !is_known_method(attr) {
                    // `helper.run(x)` on a value the walk knows nothing about.
                    self.out.unresolved_call = true;
                }
                let container = match &kind {
                    Kind::List(inner) => match attr {
                        "values" | "children" | "modules" => Some(kind.clone()),
                        // `for name, layer in self.heads.items()` binds both names to the
                        // element kind, which is harmless for the name.
                        "items" | "named_children" | "named_modules" => {
                            Some(Kind::List(Box::new(Kind::List(inner.clone()))))
                        }
                        _ => None,
                    },
                    _ => None,
                };
                let recv_tensor = kind == Kind::Tensor;
                if matches!(
                    attr,
                    "get" | "setdefault" | "pop" | "__contains__" | "__getitem__"
                ) && let Some(first) = c.arguments.args.first()
                {
                    let key = self.expr(first);
                    self.cache_lookup(&a.value, &key, c.range());
                }
                self.record(
                    c,
                    Callee::Method {
                        name: attr,
                        recv: kind,
                    },
                );
                let (arg_taint, _) = self.args(c);
                if let Some(kind) = container {
                    return Val::of(kind);
                }
                let (kind, taint) = method_result(attr, recv_tensor);
                let taint = if kind == Kind::Tensor {
                    0
                } else {
                    taint | recv.taint | if kind == Kind::Other { arg_taint } else { 0 }
                };
                Val { kind, taint }
            }
        }
    }
}

impl<'a> Walker<'_, 'a> {
    /// `value.attr(...)` where the value is one of `members`: what each of them runs.
    fn method_on_members(&mut self, c: &'a ast::ExprCall, attr: &str, members: Vec<Kind>) {
        if members.is_empty() {
            self.out.unresolved_call = true;
        }
        let runs = matches!(attr, "forward" | "__call__");
        let what = format!(".{attr}");
        for member in members {
            match member {
                Kind::Instance(class) | Kind::Class(class) => {
                    let kind = self.member(class, attr).kind;
                    if !(kind == Kind::Unknown && NN_MODULE_METHODS.contains(&attr)) {
                        self.invoke(c, kind, &what);
                    }
                }
                Kind::Layer(_) | Kind::List(_) if runs => {
                    self.invoke(c, member, &what);
                }
                Kind::Unknown if !is_known_method(attr) => self.out.unresolved_call = true,
                _ => {}
            }
        }
    }
}

/// `nn.Module` methods that do not run `forward`: calling one of them on a module of the file
/// that does not define it is resolved.
const NN_MODULE_METHODS: &[&str] = &[
    "add_module",
    "apply",
    "bfloat16",
    "buffers",
    "children",
    "cpu",
    "cuda",
    "double",
    "eval",
    "extra_repr",
    "float",
    "get_buffer",
    "get_parameter",
    "get_submodule",
    "half",
    "load_state_dict",
    "modules",
    "named_buffers",
    "named_children",
    "named_modules",
    "named_parameters",
    "parameters",
    "register_buffer",
    "register_module",
    "register_parameter",
    "requires_grad_",
    "state_dict",
    "to",
    "train",
    "type",
    "zero_grad",
];

/// Methods of tensors, lists, dicts and strings: a call of one on a value of unknown kind is
/// taken to be one of those and to run no code of the module.
fn is_known_method(name: &str) -> bool {
    listed(ALLOWED_METHODS, name)
        || listed(COMPUTE_METHODS, name)
        || method_result(name, false).0 != Kind::Unknown
        || matches!(
            name,
            "append"
                | "clear"
                | "copy"
                | "count"
                | "decode"
                | "encode"
                | "endswith"
                | "extend"
                | "format"
                | "get"
                | "index"
                | "insert"
                | "items"
                | "join"
                | "keys"
                | "lower"
                | "pop"
                | "remove"
                | "replace"
                | "setdefault"
                | "split"
                | "startswith"
                | "strip"
                | "update"
                | "upper"
                | "values"
        )
}

/// Python builtins the walk gives a meaning to (never resolved through a star import).
fn is_builtin(id: &str) -> bool {
    matches!(
        id,
        "id" | "hash"
            | "len"
            | "int"
            | "float"
            | "tuple"
            | "list"
            | "str"
            | "min"
            | "max"
            | "abs"
            | "round"
            | "range"
            | "bool"
            | "sorted"
            | "divmod"
            | "pow"
            | "isinstance"
            | "callable"
            | "hasattr"
            | "print"
            | "repr"
            | "format"
            | "enumerate"
            | "zip"
            | "super"
            | "dict"
            | "set"
            | "getattr"
            | "setattr"
            | "type"
    )
}

/// Builtins (and builtin exception types) that never call back into the module's code, so a
/// call of one is resolved. `map`, `filter`, `functools.reduce` and the like are not here: they
/// call what they are given.
fn runs_no_module_code(id: &str) -> bool {
    is_builtin(id)
        || matches!(
            id,
            "all"
                | "any"
                | "bin"
                | "bytearray"
                | "bytes"
                | "chr"
                | "complex"
                | "dir"
                | "frozenset"
                | "hex"
                | "issubclass"
                | "iter"
                | "next"
                | "object"
                | "oct"
                | "ord"
                | "reversed"
                | "slice"
                | "sum"
        )
        || id.ends_with("Error")
        || id.ends_with("Exception")
        || id.ends_with("Warning")
        || id == "StopIteration"
}

/// The more informative of two values (for `a if c else b`, `a or b`).
fn merge(a: Val, b: Val) -> Val {
    let taint = a.taint | b.taint;
    let kind = match (&a.kind, &b.kind) {
        // `self.fast if ok else self.slow`: a call through it may run either.
        (x, y) if x.runs_code() || y.runs_code() => a.kind.join(b.kind),
        (Kind::Unknown, _) => b.kind,
        (Kind::Other, k) if *k != Kind::Unknown => b.kind,
        _ => a.kind,
    };
    Val { kind, taint }
}

/// Forwards the children of an expression or statement kind the walker has no case for.
struct Fwd<'w, 's, 'a> {
    w: &'w mut Walker<'s, 'a>,
    taint: u8,
}

impl<'a> Visitor<'a> for Fwd<'_, '_, 'a> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        let v = self.w.expr(expr);
        self.taint |= v.taint;
    }

    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        self.w.stmt(stmt);
    }
}
