//! The semantic model of one candidate module: what its names are bound to (imports, aliases,
//! functions, classes, Triton kernels), which class is `ModelNew`, and what each class stores on
//! `self`. Built from the statements alone, without walking expressions in depth.

use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

pub(crate) type FuncId = usize;
pub(crate) type ClassId = usize;

/// Statement nesting deeper than this is not analysed (Python itself stops at 100 blocks).
pub(crate) const MAX_DEPTH: u32 = 200;

/// A function or method defined in the module.
pub(crate) struct Func<'a> {
    pub def: &'a ast::StmtFunctionDef,
    pub class: Option<ClassId>,
    /// Decorated with `@triton.jit`, `@triton.autotune` or `@triton.heuristics`.
    pub kernel: bool,
}

/// A class defined at module level.
pub(crate) struct Class<'a> {
    pub def: &'a ast::StmtClassDef,
    pub methods: Vec<FuncId>,
    /// What `self.X` (or a class-body `X = ...`) holds, by attribute name.
    pub attrs: Vec<(&'a str, Kind)>,
}

/// What the verifier knows about a value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Kind {
    Unknown,
    /// A `torch.Tensor`.
    Tensor,
    /// Known not to be a tensor: numbers, strings, shapes, `None`, tuples of those.
    Other,
    /// A dict (a candidate cache).
    Dict,
    /// A name bound to a module or module member, e.g. `mm = torch.matmul`.
    Qual(String),
    /// An instance of a `torch.nn` layer class (qualified class name).
    Layer(String),
    /// An instance of a class defined in the module.
    Instance(ClassId),
    Class(ClassId),
    Func(FuncId),
    Kernel(FuncId),
    /// A list, tuple, `nn.ModuleList`, `nn.Sequential` or `nn.ModuleDict` whose elements have
    /// this kind.
    List(Box<Kind>),
    /// One of several kinds: the elements of a container of mixed modules, or an attribute
    /// bound to different things on different paths. Empty while nothing is known (the
    /// elements of a container built empty); it then says no more than [`Kind::Unknown`].
    OneOf(Vec<Kind>),
}

impl Kind {
    /// How much a binding says; a later binding replaces an earlier one only if it says more.
    pub(crate) fn rank(&self) -> u8 {
        match self {
            Kind::Unknown => 0,
            Kind::OneOf(members) if members.is_empty() => 0,
            Kind::Other => 1,
            _ => 2,
        }
    }

    /// The elements of a container nothing has been put in yet.
    pub(crate) fn empty_list() -> Kind {
        Kind::List(Box::new(Kind::OneOf(Vec::new())))
    }

    /// Whether calling a value of this kind can run code of the module (or a PyTorch layer).
    pub(crate) fn runs_code(&self) -> bool {
        matches!(
            self,
            Kind::Instance(_)
                | Kind::Layer(_)
                | Kind::Func(_)
                | Kind::Kernel(_)
                | Kind::Class(_)
                | Kind::List(_)
                | Kind::OneOf(_)
        )
    }

    /// What a value bound to `self` on one path and to `other` on another may be. Callable
    /// kinds are kept side by side, so that a call through the value follows every one of them
    /// (and an unknown one among them keeps the call unresolved); for plain values the binding
    /// that says more wins.
    pub(crate) fn join(self, other: Kind) -> Kind {
        if self == other {
            return self;
        }
        match (self, other) {
            (Kind::OneOf(members), other) if members.is_empty() => other,
            (this, Kind::OneOf(members)) if members.is_empty() => this,
            (Kind::List(a), Kind::List(b)) => Kind::List(Box::new(a.join(*b))),
            (a, b) if a.runs_code() || b.runs_code() => {
                let mut members: Vec<Kind> = Vec::new();
                for kind in [a, b] {
                    let parts = match kind {
                        Kind::OneOf(parts) => parts,
                        // `None` (or a number) beside a module: not callable, nothing to follow.
                        Kind::Other => Vec::new(),
                        other => vec![other],
                    };
                    for part in parts {
                        if !members.contains(&part) {
                            members.push(part);
                        }
                    }
                }
                if members.len() == 1 {
                    members.pop().unwrap_or(Kind::Unknown)
                } else {
                    Kind::OneOf(members)
                }
            }
            (a, b) => {
                if b.rank() > a.rank() {
                    b
                } else {
                    a
                }
            }
        }
    }

    /// The kind of the elements of an iterable of this kind.
    pub(crate) fn elem(&self) -> Kind {
        match self {
            Kind::List(inner) => (**inner).clone(),
            // Iterating an `nn.Sequential` of PyTorch layers gives PyTorch layers.
            Kind::Layer(q) if q == "torch.nn.Sequential" => self.clone(),
            Kind::OneOf(members) if !members.is_empty() => members
                .iter()
                .map(Kind::elem)
                .reduce(Kind::join)
                .unwrap_or(Kind::Unknown),
            Kind::Tensor => Kind::Tensor,
            _ => Kind::Unknown,
        }
    }
}

/// What the name `ModelNew` is bound to.
pub(crate) enum Target<'a> {
    Missing,
    Class(ClassId),
    /// Bound by an import or an assignment to something that is not a class of this module.
    Alias(TextRange, Option<&'a Expr>),
}

pub(crate) struct Semantic<'a> {
    pub module: &'a ast::ModModule,
    imports: Vec<(&'a str, String)>,
    star_imports: Vec<String>,
    pub funcs: Vec<Func<'a>>,
    pub classes: Vec<Class<'a>>,
    module_funcs: Vec<(&'a str, FuncId)>,
    module_classes: Vec<(&'a str, ClassId)>,
    /// Other module-level bindings (assignment targets).
    module_names: Vec<&'a str>,
    /// Module-level names bound to a dict.
    dict_globals: Vec<&'a str>,
    /// `k = triton.jit(f)`.
    kernel_aliases: Vec<(&'a str, FuncId)>,
    /// Every kernel by function name (methods included), then by alias: for fast lookups.
    kernel_names: Vec<(&'a str, FuncId)>,
    /// `@torch.library.custom_op("ns::op")` registrations, as `ns.op`.
    custom_ops: Vec<(String, FuncId)>,
    pub model_new: Target<'a>,
}

/// Visits every statement of `body`, nested blocks and function and class bodies included.
pub(crate) fn walk_stmts<'a>(body: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    fn go<'a>(body: &'a [Stmt], f: &mut impl FnMut(&'a Stmt), depth: u32) {
        if depth > MAX_DEPTH {
            return;
        }
        for stmt in body {
            f(stmt);
            for_each_block(stmt, |b| go(b, f, depth + 1));
        }
    }
    go(body, f, 0);
}

/// Calls `f` on each statement block directly nested in `stmt`.
pub(crate) fn for_each_block<'a>(stmt: &'a Stmt, mut f: impl FnMut(&'a [Stmt])) {
    match stmt {
        Stmt::FunctionDef(s) => f(&s.body),
        Stmt::ClassDef(s) => f(&s.body),
        Stmt::For(s) => {
            f(&s.body);
            f(&s.orelse);
        }
        Stmt::While(s) => {
            f(&s.body);
            f(&s.orelse);
        }
        Stmt::If(s) => {
            f(&s.body);
            for clause in &s.elif_else_clauses {
                f(&clause.body);
            }
        }
        Stmt::With(s) => f(&s.body),
        Stmt::Try(s) => {
            f(&s.body);
            for ast::ExceptHandler::ExceptHandler(h) in &s.handlers {
                f(&h.body);
            }
            f(&s.orelse);
            f(&s.finalbody);
        }
        Stmt::Match(s) => {
            for case in &s.cases {
                f(&case.body);
            }
        }
        _ => {}
    }
}

/// The last dotted segment of a qualified name.
pub(crate) fn last_segment(qual: &str) -> &str {
    qual.rsplit('.').next().unwrap_or(qual)
}

/// The text of a string literal expression.
pub(crate) fn string_literal(e: &Expr) -> Option<&str> {
    match e {
        Expr::StringLiteral(s) => Some(s.value.to_str()),
        _ => None,
    }
}

/// `torch.nn` members that are containers or plumbing rather than compute layers.
const NN_NON_LAYERS: &[&str] = &[
    "Module",
    "ModuleList",
    "ModuleDict",
    "Parameter",
    "ParameterList",
    "ParameterDict",
    "Buffer",
    "Identity",
];

impl<'a> Semantic<'a> {
    pub(crate) fn new(module: &'a ast::ModModule) -> Semantic<'a> {
        let mut sem = Semantic {
            module,
            imports: Vec::new(),
            star_imports: Vec::new(),
            funcs: Vec::new(),
            classes: Vec::new(),
            module_funcs: Vec::new(),
            module_classes: Vec::new(),
            module_names: Vec::new(),
            dict_globals: Vec::new(),
            kernel_aliases: Vec::new(),
            kernel_names: Vec::new(),
            custom_ops: Vec::new(),
            model_new: Target::Missing,
        };
        walk_stmts(&module.body, &mut |stmt| sem.record_import(stmt));
        sem.collect_module(&module.body, 0);
        for class in 0..sem.classes.len() {
            sem.collect_attrs(class);
        }
        sem.kernel_names = sem
            .funcs
            .iter()
            .enumerate()
            .filter(|(_, f)| f.kernel)
            .map(|(id, f)| (f.def.name.id.as_str(), id))
            .chain(sem.kernel_aliases.iter().copied())
            .collect();
        sem
    }

    fn record_import(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(imp) => {
                for alias in &imp.names {
                    let full = alias.name.id.as_str();
                    match &alias.asname {
                        Some(local) => self.imports.push((local.id.as_str(), full.to_string())),
                        None => {
                            let root = full.split('.').next().unwrap_or(full);
                            self.imports.push((root, root.to_string()));
                        }
                    }
                }
            }
            Stmt::ImportFrom(imp) => {
                let mut base = ".".repeat(imp.level as usize);
                if let Some(module) = &imp.module {
                    base.push_str(module.id.as_str());
                }
                for alias in &imp.names {
                    let name = alias.name.id.as_str();
                    if name == "*" {
                        self.star_imports.push(base.clone());
                        continue;
                    }
                    let local = alias.asname.as_ref().unwrap_or(&alias.name).id.as_str();
                    let qual = if base.is_empty() || base.ends_with('.') {
                        format!("{base}{name}")
                    } else {
                        format!("{base}.{name}")
                    };
                    self.imports.push((local, qual));
                }
            }
            _ => {}
        }
    }

    /// Collects module-level definitions, looking through `if`/`try`/`with` blocks.
    fn collect_module(&mut self, body: &'a [Stmt], depth: u32) {
        if depth > MAX_DEPTH {
            return;
        }
        for stmt in body {
            match stmt {
                Stmt::FunctionDef(def) => {
                    let id = self.add_func(def, None);
                    self.module_funcs.push((def.name.id.as_str(), id));
                }
                Stmt::ClassDef(def) => {
                    let id = self.classes.len();
                    self.classes.push(Class {
                        def,
                        methods: Vec::new(),
                        attrs: Vec::new(),
                    });
                    self.collect_class_body(id, &def.body, 0);
                    self.module_classes.push((def.name.id.as_str(), id));
                    if def.name.id.as_str() == "ModelNew" {
                        self.model_new = Target::Class(id);
                    }
                }
                Stmt::Assign(assign) => {
                    for target in &assign.targets {
                        self.bind_module_name(target, &assign.value);
                    }
                }
                Stmt::AnnAssign(assign) => {
                    if let Some(value) = &assign.value {
                        self.bind_module_name(&assign.target, value);
                    }
                }
                Stmt::Import(imp) => {
                    for alias in &imp.names {
                        let local = alias.asname.as_ref().unwrap_or(&alias.name);
                        if local.id.as_str() == "ModelNew" {
                            self.model_new = Target::Alias(alias.range, None);
                        }
                    }
                }
                Stmt::ImportFrom(imp) => {
                    for alias in &imp.names {
                        let local = alias.asname.as_ref().unwrap_or(&alias.name);
                        if local.id.as_str() == "ModelNew" {
                            self.model_new = Target::Alias(alias.range, None);
                        }
                    }
                }
                Stmt::If(_) | Stmt::Try(_) | Stmt::With(_) => {
                    for_each_block(stmt, |b| self.collect_module(b, depth + 1));
                }
                _ => {}
            }
        }
    }

    fn collect_class_body(&mut self, class: ClassId, body: &'a [Stmt], depth: u32) {
        if depth > MAX_DEPTH {
            return;
        }
        for stmt in body {
            match stmt {
                Stmt::FunctionDef(def) => {
                    let id = self.add_func(def, Some(class));
                    self.classes[class].methods.push(id);
                }
                Stmt::If(_) | Stmt::Try(_) | Stmt::With(_) => {
                    for_each_block(stmt, |b| self.collect_class_body(class, b, depth + 1));
                }
                _ => {}
            }
        }
    }

    fn add_func(&mut self, def: &'a ast::StmtFunctionDef, class: Option<ClassId>) -> FuncId {
        let id = self.funcs.len();
        let kernel = def
            .decorator_list
            .iter()
            .any(|d| self.is_triton_decorator(&d.expression));
        for d in &def.decorator_list {
            if let Expr::Call(call) = &d.expression
                && let Some(q) = self.qualname(&call.func)
                && matches!(
                    q.as_str(),
                    "torch.library.custom_op" | "torch.library.triton_op"
                )
                && let Some(name) = call.arguments.args.first().and_then(string_literal)
            {
                self.custom_ops.push((name.replace("::", "."), id));
            }
        }
        self.funcs.push(Func { def, class, kernel });
        id
    }

    fn bind_module_name(&mut self, target: &'a Expr, value: &'a Expr) {
        match target {
            Expr::Name(name) => {
                let id = name.id.as_str();
                if id == "ModelNew" {
                    self.model_new = match value {
                        Expr::Name(v) => match self.module_class(v.id.as_str()) {
                            Some(c) if v.id.as_str() != "Model" => Target::Class(c),
                            _ => Target::Alias(target.range(), Some(value)),
                        },
                        _ => Target::Alias(target.range(), Some(value)),
                    };
                }
                self.module_names.push(id);
                if self.is_dict_constructor(value) {
                    self.dict_globals.push(id);
                }
                if let Expr::Call(call) = value
                    && self.is_triton_decorator(&call.func)
                    && let Some(Expr::Name(f)) = call.arguments.args.first()
                    && let Some(fid) = self.module_func(f.id.as_str())
                {
                    self.funcs[fid].kernel = true;
                    self.kernel_aliases.push((id, fid));
                } else if matches!(value, Expr::Attribute(_) | Expr::Name(_))
                    && let Some(q) = self.qualname(value)
                {
                    self.imports.push((id, q));
                }
            }
            Expr::Tuple(t) => {
                for elt in &t.elts {
                    if let Expr::Name(name) = elt {
                        self.module_names.push(name.id.as_str());
                    }
                }
            }
            _ => {}
        }
    }

    fn is_triton_decorator(&self, e: &Expr) -> bool {
        let e = match e {
            Expr::Call(call) => &*call.func,
            other => other,
        };
        self.qualname(e).is_some_and(|q| {
            q.starts_with("triton.")
                && matches!(last_segment(&q), "jit" | "autotune" | "heuristics")
        })
    }

    /// `{}`, `dict()`, `OrderedDict()`, `defaultdict(...)`, weak dictionaries.
    pub(crate) fn is_dict_constructor(&self, e: &Expr) -> bool {
        match e {
            Expr::Dict(_) | Expr::DictComp(_) => true,
            Expr::Call(call) => match &*call.func {
                Expr::Name(n) if n.id.as_str() == "dict" && !self.is_bound(n.id.as_str()) => true,
                func => self.qualname(func).is_some_and(|q| {
                    matches!(
                        q.as_str(),
                        "collections.OrderedDict"
                            | "collections.defaultdict"
                            | "weakref.WeakKeyDictionary"
                            | "weakref.WeakValueDictionary"
                    )
                }),
            },
            _ => false,
        }
    }

    /// The kind of a bare name with no local binding in scope.
    pub(crate) fn name_kind(&self, name: &str) -> Kind {
        if let Some(k) = self.kernel_named(name) {
            return Kind::Kernel(k);
        }
        if let Some(f) = self.module_func(name) {
            return Kind::Func(f);
        }
        if let Some(c) = self.module_class(name) {
            return Kind::Class(c);
        }
        if let Some(q) = self.import_of(name) {
            return Kind::Qual(q.to_string());
        }
        if self.dict_globals.contains(&name) {
            return Kind::Dict;
        }
        Kind::Unknown
    }

    /// The qualified name an expression refers to through the module's imports, e.g.
    /// `F.relu` -> `torch.nn.functional.relu`. `None` when the root name is not imported.
    pub(crate) fn qualname(&self, e: &Expr) -> Option<String> {
        let mut out = String::new();
        self.qual_into(e, &mut out, 0).then_some(out)
    }

    fn qual_into(&self, e: &Expr, out: &mut String, depth: u32) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        match e {
            Expr::Name(n) => {
                let id = n.id.as_str();
                if let Some(q) = self.import_of(id) {
                    out.push_str(q);
                    true
                } else {
                    false
                }
            }
            Expr::Attribute(a) if self.qual_into(&a.value, out, depth + 1) => {
                out.push('.');
                out.push_str(a.attr.id.as_str());
                true
            }
            _ => false,
        }
    }

    /// `m.name` for a bare name the module does not bind, when it star-imports `m`
    /// (`from torch import *`).
    pub(crate) fn star_qual(&self, name: &str) -> Option<String> {
        let star = self.star_imports.last()?;
        (!self.is_bound(name)).then(|| format!("{star}.{name}"))
    }

    pub(crate) fn import_of(&self, name: &str) -> Option<&str> {
        self.imports
            .iter()
            .rev()
            .find(|(local, _)| *local == name)
            .map(|(_, q)| q.as_str())
    }

    /// Whether the module binds `name` itself (import, def, class or assignment).
    pub(crate) fn is_bound(&self, name: &str) -> bool {
        self.imports.iter().any(|(l, _)| *l == name)
            || self.module_funcs.iter().any(|(n, _)| *n == name)
            || self.module_classes.iter().any(|(n, _)| *n == name)
            || self.module_names.contains(&name)
    }

    pub(crate) fn module_func(&self, name: &str) -> Option<FuncId> {
        self.module_funcs
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, id)| *id)
    }

    pub(crate) fn module_class(&self, name: &str) -> Option<ClassId> {
        self.module_classes
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, id)| *id)
    }

    pub(crate) fn is_dict_global(&self, name: &str) -> bool {
        self.dict_globals.contains(&name)
    }

    /// A module-level kernel (or kernel alias) called `name`.
    pub(crate) fn kernel_named(&self, name: &str) -> Option<FuncId> {
        if !self.kernel_names.iter().any(|(n, _)| *n == name) {
            return None;
        }
        if let Some(f) = self.module_func(name)
            && self.funcs[f].kernel
        {
            return Some(f);
        }
        self.kernel_aliases
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, id)| *id)
    }

    /// Any kernel whose function name is `name`, methods included (for `obj.kernel[grid]`).
    pub(crate) fn any_kernel_named(&self, name: &str) -> Option<FuncId> {
        if !self.kernel_names.iter().any(|(n, _)| *n == name) {
            return None;
        }
        self.kernel_named(name).or_else(|| {
            self.kernel_names
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, id)| *id)
        })
    }

    pub(crate) fn kernels(&self) -> impl Iterator<Item = FuncId> + '_ {
        (0..self.funcs.len()).filter(|&f| self.funcs[f].kernel)
    }

    pub(crate) fn custom_op(&self, dotted: &str) -> Option<FuncId> {
        self.custom_ops
            .iter()
            .find(|(n, _)| n == dotted)
            .map(|(_, f)| *f)
    }

    /// The classes of the module a class derives from (itself first), bases before theirs.
    pub(crate) fn class_chain(&self, class: ClassId) -> Vec<ClassId> {
        let mut chain = vec![class];
        let mut i = 0;
        while i < chain.len() && chain.len() < 16 {
            let def = self.classes[chain[i]].def;
            for base in def.bases() {
                if let Expr::Name(n) = base
                    && let Some(b) = self.module_class(n.id.as_str())
                    && !chain.contains(&b)
                {
                    chain.push(b);
                }
            }
            i += 1;
        }
        chain
    }

    /// The method `name` of `class` or of one of its module-level bases.
    pub(crate) fn find_method(&self, class: ClassId, name: &str) -> Option<FuncId> {
        self.class_chain(class).into_iter().find_map(|c| {
            self.classes[c]
                .methods
                .iter()
                .rev()
                .copied()
                .find(|&m| self.funcs[m].def.name.id.as_str() == name)
        })
    }

    /// The kind of `self.name` on an instance of `class`.
    pub(crate) fn attr_kind(&self, class: ClassId, name: &str) -> Kind {
        for c in self.class_chain(class) {
            if let Some((_, k)) = self.classes[c].attrs.iter().find(|(n, _)| *n == name) {
                return k.clone();
            }
        }
        Kind::Unknown
    }

    /// A readable name for messages: `ModelNew.forward`, `triton_matmul`.
    pub(crate) fn func_label(&self, f: FuncId) -> String {
        let func = &self.funcs[f];
        match func.class {
            Some(c) => format!("{}.{}", self.classes[c].def.name.id, func.def.name.id),
            None => func.def.name.id.to_string(),
        }
    }

    /// Whether a class derives (directly or through module classes) from the reference `Model`.
    pub(crate) fn model_base(&self, class: ClassId) -> Option<&'a Expr> {
        for c in self.class_chain(class) {
            for base in self.classes[c].def.bases() {
                let is_model = match base {
                    Expr::Name(n) => n.id.as_str() == "Model",
                    Expr::Attribute(a) => a.attr.id.as_str() == "Model",
                    _ => false,
                };
                if is_model {
                    return Some(base);
                }
            }
        }
        None
    }
}

/// The name of a method's `self` parameter (none for static methods).
pub(crate) fn self_param(def: &ast::StmtFunctionDef) -> Option<&str> {
    let is_static = def
        .decorator_list
        .iter()
        .any(|d| matches!(&d.expression, Expr::Name(n) if n.id.as_str() == "staticmethod"));
    if is_static {
        return None;
    }
    let params = &def.parameters;
    params
        .posonlyargs
        .first()
        .or_else(|| params.args.first())
        .map(|p| p.parameter.name.id.as_str())
}

/// `X` when `e` is `<this>.X`.
pub(crate) fn self_attr<'a>(e: &'a Expr, this: &str) -> Option<&'a str> {
    match e {
        Expr::Attribute(a) if matches!(&*a.value, Expr::Name(n) if n.id.as_str() == this) => {
            Some(a.attr.id.as_str())
        }
        _ => None,
    }
}

/// The kind of the value a call to the qualified function `q` returns.
pub(crate) fn torch_result_kind(q: &str) -> Kind {
    let Some(rest) = q.strip_prefix("torch.") else {
        return match q.split('.').next() {
            Some("math" | "triton" | "operator") => Kind::Other,
            _ => Kind::Unknown,
        };
    };
    if let Some(member) = rest.strip_prefix("nn.")
        && !member.contains('.')
    {
        return if member == "Parameter" || member == "Buffer" {
            Kind::Tensor
        } else if member.starts_with(|c: char| c.is_ascii_uppercase())
            && !NN_NON_LAYERS.contains(&member)
        {
            Kind::Layer(q.to_string())
        } else {
            Kind::Unknown
        };
    }
    let top = rest.split('.').next().unwrap_or(rest);
    match top {
        "cuda" | "backends" | "library" | "utils" | "testing" | "jit" | "compiler" | "_dynamo"
        | "_inductor" | "distributed" | "profiler" | "autograd" | "device" | "Size" | "finfo"
        | "iinfo" | "dtype" | "Generator" | "Stream" | "Event" | "get_default_dtype"
        | "is_tensor" | "is_floating_point" | "is_grad_enabled" | "numel" | "no_grad"
        | "inference_mode" | "enable_grad" | "set_grad_enabled" | "manual_seed" => Kind::Unknown,
        _ => Kind::Tensor,
    }
}
