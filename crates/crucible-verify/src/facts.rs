//! One walk over the host code of the module (everything but Triton kernel bodies), collecting
//! the references, calls, imports and stores that the whole-file rules look at.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

use crate::semantic::{MAX_DEPTH, Semantic};

/// A name or attribute chain that resolves through the imports, e.g. `torch.cuda.Stream`.
pub(crate) struct Ref<'a> {
    pub qual: String,
    pub range: TextRange,
    /// Set when the reference is the function of a call.
    pub call: Option<&'a ast::ExprCall>,
}

/// One imported name: `import a.b` gives `a.b`, `from a import b` gives `a.b`.
pub(crate) struct Import {
    pub qual: String,
    pub range: TextRange,
}

#[derive(Default)]
pub(crate) struct ModuleFacts<'a> {
    pub refs: Vec<Ref<'a>>,
    /// Calls of a bare name the module does not bind (builtins): `open(...)`, `eval(...)`.
    pub builtin_calls: Vec<(&'a str, &'a ast::ExprCall)>,
    /// Calls of an attribute: `x.half()`, `s.wait_stream(...)`.
    pub method_calls: Vec<(&'a str, &'a ast::ExprCall)>,
    /// Attribute accesses that do not resolve through imports: `(attribute, range)`.
    pub attrs: Vec<(&'a str, TextRange)>,
    /// Attribute and subscript targets of assignments and `del`.
    pub stores: Vec<&'a Expr>,
    pub imports: Vec<Import>,
    /// Set when nesting beyond [`MAX_DEPTH`] was cut off.
    pub too_deep: bool,
}

impl<'a> ModuleFacts<'a> {
    pub(crate) fn collect(sem: &Semantic<'a>) -> ModuleFacts<'a> {
        let kernels: Vec<*const ast::StmtFunctionDef> = sem
            .kernels()
            .map(|k| sem.funcs[k].def as *const _)
            .collect();
        let mut walker = FactWalker {
            sem,
            kernels,
            facts: ModuleFacts::default(),
            depth: 0,
        };
        walker.visit_body(&sem.module.body);
        walker.facts
    }
}

struct FactWalker<'s, 'a> {
    sem: &'s Semantic<'a>,
    kernels: Vec<*const ast::StmtFunctionDef>,
    facts: ModuleFacts<'a>,
    depth: u32,
}

impl<'a> FactWalker<'_, 'a> {
    fn import(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(imp) => {
                for alias in &imp.names {
                    self.facts.imports.push(Import {
                        qual: alias.name.id.to_string(),
                        range: alias.range,
                    });
                }
            }
            Stmt::ImportFrom(imp) => {
                let mut base = ".".repeat(imp.level as usize);
                if let Some(module) = &imp.module {
                    base.push_str(module.id.as_str());
                }
                for alias in &imp.names {
                    let sep = if base.is_empty() || base.ends_with('.') {
                        ""
                    } else {
                        "."
                    };
                    self.facts.imports.push(Import {
                        qual: format!("{base}{sep}{}", alias.name.id),
                        range: alias.range,
                    });
                }
            }
            _ => {}
        }
    }

    fn store_target(&mut self, target: &'a Expr) {
        match target {
            Expr::Attribute(_) | Expr::Subscript(_) => self.facts.stores.push(target),
            Expr::Tuple(t) => t.elts.iter().for_each(|e| self.store_target(e)),
            Expr::List(l) => l.elts.iter().for_each(|e| self.store_target(e)),
            Expr::Starred(s) => self.store_target(&s.value),
            _ => {}
        }
    }
}

impl<'a> Visitor<'a> for FactWalker<'_, 'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.depth > MAX_DEPTH {
            self.facts.too_deep = true;
            return;
        }
        self.depth += 1;
        match stmt {
            Stmt::FunctionDef(def) if self.kernels.contains(&(def as *const _)) => {
                // A kernel body is Triton code, not host code: only its decorators are visited.
                for d in &def.decorator_list {
                    self.visit_expr(&d.expression);
                }
            }
            Stmt::Import(_) | Stmt::ImportFrom(_) => self.import(stmt),
            _ => {
                match stmt {
                    Stmt::Assign(a) => a.targets.iter().for_each(|t| self.store_target(t)),
                    Stmt::AugAssign(a) => self.store_target(&a.target),
                    Stmt::AnnAssign(a) => self.store_target(&a.target),
                    Stmt::Delete(d) => d.targets.iter().for_each(|t| self.store_target(t)),
                    _ => {}
                }
                visitor::walk_stmt(self, stmt);
            }
        }
        self.depth -= 1;
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.depth > MAX_DEPTH {
            self.facts.too_deep = true;
            return;
        }
        self.depth += 1;
        match expr {
            Expr::Name(_) | Expr::Attribute(_) => {
                if let Some(qual) = self.sem.qualname(expr) {
                    self.facts.refs.push(Ref {
                        qual,
                        range: expr.range(),
                        call: None,
                    });
                } else {
                    if let Expr::Attribute(a) = expr {
                        self.facts.attrs.push((a.attr.id.as_str(), a.range));
                    }
                    visitor::walk_expr(self, expr);
                }
            }
            Expr::Call(call) => {
                match &*call.func {
                    Expr::Name(n) if !self.sem.is_bound(n.id.as_str()) => {
                        self.facts.builtin_calls.push((n.id.as_str(), call));
                    }
                    Expr::Attribute(a) => self.facts.method_calls.push((a.attr.id.as_str(), call)),
                    _ => {}
                }
                match self.sem.qualname(&call.func) {
                    Some(qual) => {
                        self.facts.refs.push(Ref {
                            qual,
                            range: call.func.range(),
                            call: Some(call),
                        });
                        self.visit_arguments(&call.arguments);
                    }
                    None => visitor::walk_expr(self, expr),
                }
            }
            _ => visitor::walk_expr(self, expr),
        }
        self.depth -= 1;
    }
}
