//! Specialisation: the analysis turned into a first-order program (paper 001 §6).
//!
//! One function per reachable key (a code, an abstract environment, an abstract argument), and
//! every call site of every function resolved to what it calls: the function of one key, a
//! primitive, or (for a boxed procedure) a dispatch over the functions its code may be. The
//! function bodies are the Core of their codes; `exec.rs` runs this program, `show` prints it.

use crate::analysis::{Analysis, Code, FlowError, Target};
use crate::domain::{Av, CodeId};
use std::collections::HashMap;
use std::rc::Rc;
use vlad_core::{ExprId, Var};

/// The target of each call site (key, node) of the specialised program.
pub type Targets = HashMap<(usize, ExprId), Target>;

/// The abstract value of each expression (key, node) of the specialised program; a node that a
/// body reaches with different values (a shared subexpression) has them all.
pub type Values = HashMap<(usize, ExprId), Vec<Av>>;

/// What a walk of the reachable bodies found: which keys are reachable, the targets and
/// values of their nodes, and whether a body gave more than its key's result.
type Walk = (Vec<bool>, Targets, Values, bool);

/// One specialised function.
#[derive(Clone, Debug)]
pub struct Fun {
    pub code: CodeId,
    pub env: Rc<[Av]>,
    pub arg: Av,
    pub result: Av,
}

/// The specialised program: its functions (indexed by analysis key; only reachable ones are
/// `Some`), the targets of their call sites, and the entry function of each top-level
/// expression.
pub struct Program {
    pub codes: Vec<Code>,
    pub code_index: HashMap<(Vec<Var>, Vec<ExprId>, u32), CodeId>,
    pub funs: Vec<Option<Fun>>,
    pub targets: Targets,
    pub values: Values,
    pub entries: Vec<usize>,
}

impl Program {
    /// The code of a closure of member `index` of the group (`names`, `lambdas`), if the
    /// program has it.
    pub fn code_of(&self, names: &[Var], lambdas: &[ExprId], index: u32) -> Option<CodeId> {
        self.code_index
            .get(&(names.to_vec(), lambdas.to_vec(), index))
            .copied()
    }

    /// The number of specialised functions.
    pub fn len(&self) -> usize {
        self.funs.iter().flatten().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Analysis<'_> {
    /// The reachable keys from `entries` and the targets of their call sites, and whether a
    /// walked body gave more than its key's result (see `specialise`).
    fn walk(&mut self, entries: &[usize]) -> Result<Walk, FlowError> {
        let mut grown = false;
        let mut reachable = vec![false; self.keys.len()];
        let mut work: Vec<usize> = entries.to_vec();
        let mut targets: Targets = HashMap::new();
        let mut values: Values = HashMap::new();
        while let Some(k) = work.pop() {
            if k >= reachable.len() {
                reachable.resize(k + 1, false);
            }
            if reachable[k] {
                continue;
            }
            reachable[k] = true;
            self.recording = Some((k, HashMap::new()));
            self.recorded_values = Some(HashMap::new());
            let r = self.eval_key(k);
            let (_, table) = self.recording.take().expect("recording");
            let vals = self.recorded_values.take().expect("recording");
            grown |= self.grow_result(k, &r?);
            values.extend(vals.into_iter().map(|(e, v)| ((k, e), v)));
            for (site, mut ts) in table {
                let t = ts.pop().unwrap_or(Target::Unreachable);
                if ts.iter().any(|u| *u != t) {
                    // One node reached twice in one body (a shared subexpression) with
                    // different callees: the program would need the path to tell them apart.
                    return self
                        .fail("internal error: a call site with two different targets".into());
                }
                t.keys(&mut work);
                targets.insert(site, t);
            }
        }
        reachable.resize(self.keys.len(), false);
        Ok((reachable, targets, values, grown))
    }

    /// Specialises the analysed program, starting from the keys of its top-level expressions.
    /// Every reachable key's body is walked once more with the final table, recording the
    /// target of each call site.
    pub fn specialise(&mut self, entries: &[usize]) -> Result<Program, FlowError> {
        // Walking a body with the final table normally finds only analysed calls; if a walk
        // meets a new one (a widened key other than the one the analysis used when it last
        // evaluated that body), analyse again and walk again. Keys only accumulate and results
        // only grow, so this ends. The same if a walk grows a summary of the environments of
        // boxed closures (dispatches read them).
        // And if a walk finds that a body gives more than its key's result: a call in it now
        // goes to a key widened after the body was last evaluated (one for every argument
        // of a code with too many keys), whose result is wider than the one the analysis
        // read; nothing told the analysis, since no result it read had changed. The result
        // grows, and whatever read it is analysed again.
        let (reachable, targets, values) = loop {
            let known = (self.keys.len(), self.generation);
            let (reachable, targets, values, grown) = self.walk(entries)?;
            self.summaries_grown();
            if (self.keys.len(), self.generation) == known && !grown {
                break (reachable, targets, values);
            }
            // Everything again: the walked bodies read the new keys' results too.
            for k in 0..self.keys.len() {
                self.enqueue(k);
            }
            self.solve()?;
        };
        let funs = (0..self.keys.len())
            .map(|k| {
                reachable[k].then(|| Fun {
                    code: self.keys[k].code,
                    env: self.keys[k].env.clone(),
                    arg: self.keys[k].arg.clone(),
                    result: self.results[k].clone(),
                })
            })
            .collect();
        let code_index = self
            .codes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                (
                    (c.names.to_vec(), c.lambdas.to_vec(), c.index),
                    CodeId(i as u32),
                )
            })
            .collect();
        Ok(Program {
            codes: self.codes.clone(),
            code_index,
            funs,
            targets,
            values,
            entries: entries.to_vec(),
        })
    }
}

impl Target {
    /// The keys this target may call.
    pub fn keys(&self, out: &mut Vec<usize>) {
        match self {
            Target::Direct(k) => out.push(*k),
            Target::IfProc(a, b) => {
                a.keys(out);
                b.keys(out);
            }
            Target::Checkpoint(t)
            | Target::Build(t)
            | Target::ForwardBuild(t)
            | Target::Ifold(t)
            | Target::ForwardIfold(t)
            | Target::IfoldTape(t) => t.keys(out),
            Target::Dispatch(ts) => {
                for t in ts {
                    t.keys(out);
                }
            }
            Target::Prim(_) | Target::NotProcedure | Target::Unreachable => {}
        }
    }
}
