//! Building a function: fresh variables, and statements appended to the innermost open block.

use crate::ir::*;

pub struct Builder {
    pub vars: Vec<VarInfo>,
    /// The open blocks, innermost last.
    blocks: Vec<Block>,
}

impl Default for Builder {
    fn default() -> Builder {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            vars: Vec::new(),
            blocks: vec![Vec::new()],
        }
    }

    /// A fresh variable named `PREFIX<n>`.
    pub fn var(&mut self, ty: Ty, prefix: &str) -> Var {
        fresh_var(&mut self.vars, ty, prefix)
    }

    /// A fresh variable with exactly this name (parameters: `a0`, `e1_0`).
    pub fn named_var(&mut self, ty: Ty, name: String) -> Var {
        let v = Var(self.vars.len() as u32);
        self.vars.push(VarInfo { ty, name });
        v
    }

    pub fn ty(&self, v: Var) -> &Ty {
        &self.vars[v.0 as usize].ty
    }

    pub fn push(&mut self, s: Stmt) {
        self.blocks.last_mut().expect("an open block").push(s);
    }

    /// `let v: ty = op`, a fresh variable.
    pub fn let1(&mut self, ty: Ty, prefix: &str, op: Op) -> Var {
        let v = self.var(ty, prefix);
        self.push(Stmt::Let(vec![v], op));
        v
    }

    /// An operation for its effect only.
    pub fn effect(&mut self, op: Op) {
        self.push(Stmt::Let(Vec::new(), op));
    }

    /// Opens a nested block (an `if` branch, a loop body).
    pub fn open(&mut self) {
        self.blocks.push(Vec::new());
    }

    /// Closes the innermost block and returns it.
    pub fn close(&mut self) -> Block {
        assert!(self.blocks.len() > 1, "closing the body");
        self.blocks.pop().expect("an open block")
    }

    /// Whether the innermost block is empty.
    pub fn is_empty(&self) -> bool {
        self.blocks.last().is_none_or(|b| b.is_empty())
    }

    /// The function built.
    pub fn finish(mut self, kind: FuncKind, params: Vec<Var>, results: Layout) -> Function {
        assert_eq!(self.blocks.len(), 1, "a block left open");
        Function {
            kind,
            params,
            results,
            vars: self.vars,
            body: self.blocks.pop().expect("the body"),
            cold: false,
        }
    }
}
