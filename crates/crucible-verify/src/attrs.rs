//! What each class of the module stores on `self`: the kinds of its attributes, read from the
//! assignments of its methods (`__init__` above all) and its class body. Containers of modules
//! are followed through their construction: `nn.Sequential(*layers)`, `nn.ModuleList([...])`,
//! `nn.ModuleDict({...})`, lists built with `append`/`extend` in a loop, comprehensions, and
//! `functools.partial` around a function of the module. What cannot be read this way stays
//! [`Kind::Unknown`], which keeps a call through it unresolved.

use ruff_python_ast::{self as ast, Expr, Stmt};

use crate::semantic::{
    ClassId, Kind, MAX_DEPTH, Semantic, for_each_block, self_attr, self_param, string_literal,
    torch_result_kind,
};

/// The state of reading one method (or the class body): local names and attributes so far.
struct AttrScan<'a> {
    /// The method's `self` parameter and the class, when reading a method.
    this: Option<(&'a str, ClassId)>,
    /// Local names, latest binding last.
    locals: Vec<(&'a str, Kind)>,
    /// Attributes of the class, shared by every method.
    attrs: Vec<(&'a str, Kind)>,
}

impl<'a> AttrScan<'a> {
    fn local(&self, name: &str) -> Option<&Kind> {
        self.locals
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| k)
    }

    /// The recorded kind of the attribute or local that `target` names.
    fn slot(&mut self, target: &'a Expr) -> Option<&mut Kind> {
        match target {
            Expr::Name(n) => self
                .locals
                .iter_mut()
                .rev()
                .find(|(name, _)| *name == n.id.as_str())
                .map(|(_, k)| k),
            other => {
                let this = self.this?.0;
                let attr = self_attr(other, this)?;
                self.attrs
                    .iter_mut()
                    .find(|(name, _)| *name == attr)
                    .map(|(_, k)| k)
            }
        }
    }

    /// Adds `elem` to the elements of the container `target` holds (`layers.append(elem)`).
    fn add_elem(&mut self, target: &'a Expr, elem: Kind) {
        if let Some(Kind::List(inner)) = self.slot(target) {
            let old = std::mem::replace(&mut **inner, Kind::Unknown);
            **inner = old.join(elem);
        }
    }
}

/// Records `kind` for the attribute `name`, joined with what other assignments bound to it.
fn merge_attr<'a>(attrs: &mut Vec<(&'a str, Kind)>, name: &'a str, kind: Kind) {
    match attrs.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => {
            let old = std::mem::replace(&mut slot.1, Kind::Unknown);
            slot.1 = old.join(kind);
        }
        None => attrs.push((name, kind)),
    }
}

/// The locals after alternative branches: each name bound to the join of its kinds.
fn join_locals<'a>(branches: Vec<Vec<(&'a str, Kind)>>) -> Vec<(&'a str, Kind)> {
    let mut out: Vec<(&'a str, Kind)> = Vec::new();
    for branch in branches {
        // The latest binding of each name in this branch.
        let mut latest: Vec<(&'a str, Kind)> = Vec::new();
        for (name, kind) in branch.into_iter().rev() {
            if !latest.iter().any(|(n, _)| *n == name) {
                latest.push((name, kind));
            }
        }
        for (name, kind) in latest {
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => {
                    let old = std::mem::replace(&mut slot.1, Kind::Unknown);
                    slot.1 = old.join(kind);
                }
                None => out.push((name, kind)),
            }
        }
    }
    out
}

/// Methods of containers that put modules in them: `(name, index of the module argument,
/// whether that argument is an iterable of modules)`.
const CONTAINER_ADDS: &[(&str, usize, bool)] = &[
    ("add_module", 1, false),
    ("append", 0, false),
    ("extend", 0, true),
    ("insert", 1, false),
    ("register_module", 1, false),
];

impl<'a> Semantic<'a> {
    /// Records what each `self.X = ...` of a class's methods (and each class-body binding) holds.
    pub(crate) fn collect_attrs(&mut self, class: ClassId) {
        let mut scan = AttrScan {
            this: None,
            locals: Vec::new(),
            attrs: Vec::new(),
        };
        let def = self.classes[class].def;
        for stmt in &def.body {
            if let Stmt::Assign(assign) = stmt {
                for target in &assign.targets {
                    if let Expr::Name(n) = target {
                        let kind = self.kind_in(&assign.value, &mut scan);
                        merge_attr(&mut scan.attrs, n.id.as_str(), kind);
                    }
                }
            }
        }
        let methods = self.classes[class].methods.clone();
        for method in methods {
            let def = self.funcs[method].def;
            let Some(this) = self_param(def) else {
                continue;
            };
            scan.this = Some((this, class));
            scan.locals.clear();
            let params = &def.parameters;
            for p in params
                .posonlyargs
                .iter()
                .chain(&params.args)
                .chain(&params.kwonlyargs)
            {
                let name = p.parameter.name.id.as_str();
                if name != this {
                    // A parameter shadows a module-level name of the same spelling.
                    scan.locals.push((name, Kind::Unknown));
                }
            }
            for p in params.vararg.iter().chain(&params.kwarg) {
                scan.locals.push((p.name.id.as_str(), Kind::Unknown));
            }
            self.scan_body(&def.body, &mut scan, 0);
        }
        self.classes[class].attrs = scan.attrs;
    }

    /// Reads a block in statement order. The branches of an `if` each start from the bindings
    /// before it, and a local bound differently in two branches may afterwards be either.
    fn scan_body(&self, body: &'a [Stmt], scan: &mut AttrScan<'a>, depth: u32) {
        if depth > MAX_DEPTH {
            return;
        }
        for stmt in body {
            if let Stmt::If(s) = stmt {
                let before = scan.locals.clone();
                let mut branches = Vec::new();
                self.scan_body(&s.body, scan, depth + 1);
                branches.push(std::mem::replace(&mut scan.locals, before.clone()));
                let mut has_else = false;
                for clause in &s.elif_else_clauses {
                    has_else |= clause.test.is_none();
                    self.scan_body(&clause.body, scan, depth + 1);
                    branches.push(std::mem::replace(&mut scan.locals, before.clone()));
                }
                if !has_else {
                    branches.push(before);
                }
                scan.locals = join_locals(branches);
            } else {
                self.scan_stmt(stmt, scan);
                for_each_block(stmt, |b| self.scan_body(b, scan, depth + 1));
            }
        }
    }

    fn scan_stmt(&self, stmt: &'a Stmt, scan: &mut AttrScan<'a>) {
        match stmt {
            Stmt::Assign(assign) => {
                if let [Expr::Tuple(targets)] = &*assign.targets
                    && let Expr::Tuple(values) = &*assign.value
                    && targets.elts.len() == values.elts.len()
                {
                    for (target, value) in targets.elts.iter().zip(&values.elts) {
                        let kind = self.kind_in(value, scan);
                        self.bind(target, kind, scan);
                    }
                    return;
                }
                let kind = self.kind_in(&assign.value, scan);
                for target in &assign.targets {
                    self.bind(target, kind.clone(), scan);
                }
            }
            Stmt::AnnAssign(assign) => {
                if let Some(value) = &assign.value {
                    let kind = self.kind_in(value, scan);
                    self.bind(&assign.target, kind, scan);
                }
            }
            Stmt::AugAssign(assign) => {
                // `layers += [Block(), ...]`
                let elems = self.kind_in(&assign.value, scan).elem();
                scan.add_elem(&assign.target, elems);
            }
            Stmt::For(f) => {
                let elem = self.kind_in(&f.iter, scan).elem();
                self.bind(&f.target, elem, scan);
            }
            Stmt::Expr(e) => {
                if let Expr::Call(call) = &*e.value {
                    self.scan_call(call, scan);
                }
            }
            _ => {}
        }
    }

    /// Binds `kind` to an assignment target: a local, `self.X`, or an element of a container.
    fn bind(&self, target: &'a Expr, kind: Kind, scan: &mut AttrScan<'a>) {
        match target {
            Expr::Name(n) => scan.locals.push((n.id.as_str(), kind)),
            Expr::Attribute(_) => {
                if let Some((this, _)) = scan.this
                    && let Some(attr) = self_attr(target, this)
                {
                    merge_attr(&mut scan.attrs, attr, kind);
                }
            }
            // `self.heads["a"] = Head()` on an `nn.ModuleDict` (or a list).
            Expr::Subscript(s) => scan.add_elem(&s.value, kind),
            Expr::Tuple(t) => {
                for e in &t.elts {
                    self.bind(e, kind.elem(), scan);
                }
            }
            Expr::List(l) => {
                for e in &l.elts {
                    self.bind(e, kind.elem(), scan);
                }
            }
            Expr::Starred(s) => self.bind(&s.value, Kind::Unknown, scan),
            _ => {}
        }
    }

    /// `self.register_buffer(...)`, `self.add_module(...)`, `setattr(self, ...)`, and modules put
    /// into a container: `layers.append(...)`, `self.blocks.extend(...)`, `heads.update({...})`.
    fn scan_call(&self, call: &'a ast::ExprCall, scan: &mut AttrScan<'a>) {
        let args = &call.arguments.args;
        let this = scan.this.map(|(t, _)| t);
        match &*call.func {
            Expr::Attribute(func) => {
                let method = func.attr.id.as_str();
                let on_self = matches!(&*func.value, Expr::Name(n) if Some(n.id.as_str()) == this);
                if on_self {
                    let name = args.first().and_then(string_literal);
                    let kind = match method {
                        "register_buffer" | "register_parameter" => Some(Kind::Tensor),
                        "add_module" | "register_module" => {
                            args.get(1).map(|v| self.kind_in(v, scan))
                        }
                        _ => None,
                    };
                    if let (Some(name), Some(kind)) = (name, kind) {
                        merge_attr(&mut scan.attrs, name, kind);
                    }
                    return;
                }
                if method == "update" {
                    if let Some(d) = args.first() {
                        let values = self.dict_values(d, scan);
                        scan.add_elem(&func.value, values);
                    }
                    return;
                }
                if let Some(&(_, index, iterable)) =
                    CONTAINER_ADDS.iter().find(|(name, _, _)| *name == method)
                {
                    let kind = args.get(index).map_or(Kind::Unknown, |v| {
                        let kind = self.kind_in(v, scan);
                        if iterable { kind.elem() } else { kind }
                    });
                    scan.add_elem(&func.value, kind);
                }
            }
            Expr::Name(n) if n.id.as_str() == "setattr" && !self.is_bound("setattr") => {
                if let [obj, name, value] = &**args
                    && matches!(obj, Expr::Name(o) if Some(o.id.as_str()) == this)
                    && let Some(name) = string_literal(name)
                {
                    let kind = self.kind_in(value, scan);
                    merge_attr(&mut scan.attrs, name, kind);
                }
            }
            _ => {}
        }
    }

    /// The kind of an expression in a method (or class body) being read.
    fn kind_in(&self, e: &'a Expr, scan: &mut AttrScan<'a>) -> Kind {
        self.kind_at(e, scan, 0)
    }

    fn kind_at(&self, e: &'a Expr, scan: &mut AttrScan<'a>, depth: u32) -> Kind {
        if depth > MAX_DEPTH {
            return Kind::Unknown;
        }
        match e {
            Expr::Call(call) => self.call_kind(e, call, scan, depth),
            Expr::Name(n) => match scan.local(n.id.as_str()) {
                Some(k) => k.clone(),
                None => self.name_kind(n.id.as_str()),
            },
            Expr::Attribute(a) => {
                if let Some((this, class)) = scan.this
                    && matches!(&*a.value, Expr::Name(n) if n.id.as_str() == this)
                {
                    let attr = a.attr.id.as_str();
                    // A bound method (`self.op = self._launch`) or an attribute read earlier.
                    if let Some(m) = self.find_method(class, attr) {
                        return if self.funcs[m].kernel {
                            Kind::Kernel(m)
                        } else {
                            Kind::Func(m)
                        };
                    }
                    return scan
                        .attrs
                        .iter()
                        .find(|(n, _)| *n == attr)
                        .map_or(Kind::Unknown, |(_, k)| k.clone());
                }
                self.qualname(e).map_or(Kind::Unknown, Kind::Qual)
            }
            Expr::If(i) => {
                let body = self.kind_at(&i.body, scan, depth + 1);
                let orelse = self.kind_at(&i.orelse, scan, depth + 1);
                body.join(orelse)
            }
            Expr::Dict(_) | Expr::DictComp(_) => Kind::Dict,
            Expr::List(l) => Kind::List(Box::new(self.elems_kind(&l.elts, scan, depth))),
            Expr::Tuple(t) => {
                // Tuples of numbers are shapes; a tuple of modules is a container.
                let elems = self.elems_kind(&t.elts, scan, depth);
                if elems.runs_code() {
                    Kind::List(Box::new(elems))
                } else {
                    Kind::Other
                }
            }
            Expr::ListComp(l) => Kind::List(Box::new(self.comprehension(
                &l.generators,
                &l.elt,
                scan,
                depth,
            ))),
            Expr::Generator(g) => Kind::List(Box::new(self.comprehension(
                &g.generators,
                &g.elt,
                scan,
                depth,
            ))),
            Expr::BinOp(b) if b.op == ast::Operator::Add => {
                let left = self.kind_at(&b.left, scan, depth + 1);
                let right = self.kind_at(&b.right, scan, depth + 1);
                match (left, right) {
                    (l @ Kind::List(_), r @ Kind::List(_)) => l.join(r),
                    _ => Kind::Unknown,
                }
            }
            Expr::NumberLiteral(_)
            | Expr::StringLiteral(_)
            | Expr::BooleanLiteral(_)
            | Expr::NoneLiteral(_) => Kind::Other,
            _ => Kind::Unknown,
        }
    }

    /// The joined kind of the elements of a list or tuple display (`*xs` adds the elements of xs).
    fn elems_kind(&self, elts: &'a [Expr], scan: &mut AttrScan<'a>, depth: u32) -> Kind {
        let mut out = Kind::OneOf(Vec::new());
        for e in elts {
            let kind = match e {
                Expr::Starred(s) => self.kind_at(&s.value, scan, depth + 1).elem(),
                other => self.kind_at(other, scan, depth + 1),
            };
            out = out.join(kind);
        }
        out
    }

    fn comprehension(
        &self,
        generators: &'a [ast::Comprehension],
        elt: &'a Expr,
        scan: &mut AttrScan<'a>,
        depth: u32,
    ) -> Kind {
        let mark = scan.locals.len();
        for g in generators {
            let elem = self.kind_at(&g.iter, scan, depth + 1).elem();
            self.bind_local(&g.target, elem, scan);
        }
        let kind = self.kind_at(elt, scan, depth + 1);
        scan.locals.truncate(mark);
        kind
    }

    /// Binds comprehension variables (only locals: a comprehension cannot assign attributes).
    fn bind_local(&self, target: &'a Expr, kind: Kind, scan: &mut AttrScan<'a>) {
        match target {
            Expr::Name(n) => scan.locals.push((n.id.as_str(), kind)),
            Expr::Tuple(t) => {
                for e in &t.elts {
                    self.bind_local(e, kind.elem(), scan);
                }
            }
            _ => {}
        }
    }

    fn call_kind(
        &self,
        e: &'a Expr,
        call: &'a ast::ExprCall,
        scan: &mut AttrScan<'a>,
        depth: u32,
    ) -> Kind {
        let args = &call.arguments.args;
        if let Expr::Name(n) = &*call.func {
            let id = n.id.as_str();
            if let Some(local) = scan.local(id) {
                return match local {
                    Kind::Class(c) => Kind::Instance(*c),
                    _ => Kind::Unknown,
                };
            }
            match self.module_class(id) {
                Some(c) => return Kind::Instance(c),
                // The reference model, imported or assumed: a PyTorch module.
                None if id == "Model" => return Kind::Layer("Model".to_string()),
                None => {}
            }
            if !self.is_bound(id) {
                return match (id, args.first()) {
                    // Callable wrappers: calling the result calls the function.
                    ("staticmethod" | "classmethod", Some(f)) => self.kind_at(f, scan, depth + 1),
                    ("list" | "tuple", Some(it)) => {
                        Kind::List(Box::new(self.kind_at(it, scan, depth + 1).elem()))
                    }
                    ("dict", _) => Kind::Dict,
                    _ => Kind::Unknown,
                };
            }
        }
        if self.is_dict_constructor(e) {
            return Kind::Dict;
        }
        let Some(q) = self.qualname(&call.func) else {
            return Kind::Unknown;
        };
        match q.as_str() {
            "torch.nn.ModuleList" | "torch.nn.Sequential" => {
                let sequential = q == "torch.nn.Sequential";
                let mut elems = Kind::OneOf(Vec::new());
                for arg in args {
                    let kind = match arg {
                        Expr::Starred(s) => self.kind_at(&s.value, scan, depth + 1).elem(),
                        // `nn.Sequential(OrderedDict([("fc", Linear()), ...]))`
                        Expr::Call(_) if sequential && self.is_dict_constructor(arg) => {
                            self.dict_values(arg, scan)
                        }
                        // `nn.Sequential(a, b)` takes modules, `nn.ModuleList(xs)` an iterable.
                        other if sequential => self.kind_at(other, scan, depth + 1),
                        other => self.kind_at(other, scan, depth + 1).elem(),
                    };
                    elems = elems.join(kind);
                }
                let all_layers = match &elems {
                    Kind::Layer(_) => true,
                    Kind::OneOf(members) => {
                        !members.is_empty() && members.iter().all(|m| matches!(m, Kind::Layer(_)))
                    }
                    _ => false,
                };
                if sequential && all_layers {
                    Kind::Layer(q)
                } else {
                    Kind::List(Box::new(elems))
                }
            }
            "torch.nn.ParameterList" => Kind::List(Box::new(Kind::Tensor)),
            "torch.nn.ModuleDict" => match args.first() {
                Some(d) => Kind::List(Box::new(self.dict_values(d, scan))),
                None => Kind::empty_list(),
            },
            "functools.partial" => args
                .first()
                .map_or(Kind::Unknown, |f| self.kind_at(f, scan, depth + 1)),
            _ => torch_result_kind(&q),
        }
    }

    /// The joined kind of the values of a mapping: `{"a": A(), ...}`, `dict(a=A())`,
    /// `OrderedDict([("a", A()), ...])`.
    fn dict_values(&self, d: &'a Expr, scan: &mut AttrScan<'a>) -> Kind {
        let mut out = Kind::OneOf(Vec::new());
        match d {
            Expr::Dict(dict) => {
                for item in &dict.items {
                    let kind = match item.key {
                        Some(_) => self.kind_in(&item.value, scan),
                        // `**other`
                        None => Kind::Unknown,
                    };
                    out = out.join(kind);
                }
            }
            Expr::DictComp(dc) => {
                out = self.comprehension(&dc.generators, &dc.value, scan, 1);
            }
            Expr::Call(call) if self.is_dict_constructor(d) => {
                for kw in &call.arguments.keywords {
                    let kind = self.kind_in(&kw.value, scan);
                    out = out.join(kind);
                }
                for arg in &call.arguments.args {
                    out = out.join(self.pairs_values(arg, scan));
                }
            }
            Expr::Name(_) => {
                // A local dict of modules is not followed.
                out = Kind::Unknown;
            }
            other => out = self.pairs_values(other, scan),
        }
        out
    }

    /// The second elements of a list of `(name, module)` pairs.
    fn pairs_values(&self, e: &'a Expr, scan: &mut AttrScan<'a>) -> Kind {
        let elts = match e {
            Expr::List(l) => &l.elts,
            Expr::Tuple(t) => &t.elts,
            Expr::Dict(_) | Expr::DictComp(_) => return self.dict_values(e, scan),
            _ => return Kind::Unknown,
        };
        let mut out = Kind::OneOf(Vec::new());
        for pair in elts {
            let kind = match pair {
                Expr::Tuple(t) if t.elts.len() == 2 => self.kind_in(&t.elts[1], scan),
                _ => Kind::Unknown,
            };
            out = out.join(kind);
        }
        out
    }
}
