//! What a Triton kernel body does that the rules care about: the other `@triton.jit`
//! functions it calls, and whether it writes memory.

use ruff_python_ast::visitor::{self, Visitor};
use ruff_python_ast::{Expr, Stmt};

use crate::semantic::{FuncId, MAX_DEPTH, Semantic, last_segment};

struct KernelScan<'s, 'a> {
    sem: &'s Semantic<'a>,
    callees: Vec<FuncId>,
    stores: bool,
    depth: u32,
}

impl<'a> Visitor<'a> for KernelScan<'_, 'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        if self.depth <= MAX_DEPTH {
            self.depth += 1;
            visitor::walk_stmt(self, stmt);
            self.depth -= 1;
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        if self.depth > MAX_DEPTH {
            return;
        }
        if let Expr::Name(n) = expr
            && let Some(k) = self.sem.kernel_named(n.id.as_str())
        {
            // A `@triton.jit` function passed as a value, e.g. the combine function of
            // `tl.associative_scan` or `tl.reduce`.
            self.callees.push(k);
        }
        if let Expr::Call(call) = expr {
            let name = match &*call.func {
                Expr::Name(n) => Some(n.id.as_str()),
                Expr::Attribute(a) => Some(a.attr.id.as_str()),
                _ => None,
            };
            if let Some(name) = name {
                let name = last_segment(name);
                if name == "store" || name.ends_with("_store") || name.starts_with("atomic_") {
                    self.stores = true;
                } else if let Some(k) = self.sem.any_kernel_named(name) {
                    self.callees.push(k);
                }
            }
        }
        self.depth += 1;
        visitor::walk_expr(self, expr);
        self.depth -= 1;
    }
}

/// What each kernel body calls and whether it stores, scanned once per module.
pub(crate) struct KernelTable {
    /// Per function id: `Some((callees, stores))` for kernels.
    scans: Vec<Option<(Vec<FuncId>, bool)>>,
}

impl KernelTable {
    pub(crate) fn new(sem: &Semantic<'_>) -> KernelTable {
        let scans = sem
            .funcs
            .iter()
            .map(|f| {
                f.kernel.then(|| {
                    let mut scan = KernelScan {
                        sem,
                        callees: Vec::new(),
                        stores: false,
                        depth: 0,
                    };
                    scan.visit_body(&f.def.body);
                    (scan.callees, scan.stores)
                })
            })
            .collect();
        KernelTable { scans }
    }

    /// The kernels reachable from `roots` through device-function calls (roots included),
    /// and whether any of them writes memory.
    pub(crate) fn closure(&self, roots: &[FuncId]) -> (Vec<FuncId>, bool) {
        let mut seen: Vec<FuncId> = Vec::new();
        let mut stores = false;
        let mut queue: Vec<FuncId> = roots.to_vec();
        while let Some(k) = queue.pop() {
            if seen.contains(&k) {
                continue;
            }
            seen.push(k);
            if let Some(Some((callees, s))) = self.scans.get(k) {
                stores |= *s;
                queue.extend(callees);
            }
        }
        (seen, stores)
    }
}

/// Kernels a block of host code refers to by name (`kernel`, `self.kernel`, `mod.kernel`).
pub(crate) fn referenced_kernels(sem: &Semantic<'_>, body: &[Stmt]) -> Vec<FuncId> {
    struct Refs<'s, 'a> {
        sem: &'s Semantic<'a>,
        found: Vec<FuncId>,
        depth: u32,
    }
    impl<'b> Visitor<'b> for Refs<'_, '_> {
        fn visit_stmt(&mut self, stmt: &'b Stmt) {
            if self.depth <= MAX_DEPTH {
                self.depth += 1;
                visitor::walk_stmt(self, stmt);
                self.depth -= 1;
            }
        }

        fn visit_expr(&mut self, expr: &'b Expr) {
            if self.depth > MAX_DEPTH {
                return;
            }
            let kernel = match expr {
                Expr::Name(n) => self.sem.kernel_named(n.id.as_str()),
                Expr::Attribute(a) => self.sem.any_kernel_named(a.attr.id.as_str()),
                _ => None,
            };
            self.found.extend(kernel);
            self.depth += 1;
            visitor::walk_expr(self, expr);
            self.depth -= 1;
        }
    }
    let mut refs = Refs {
        sem,
        found: Vec::new(),
        depth: 0,
    };
    refs.visit_body(body);
    refs.found
}
