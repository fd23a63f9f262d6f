//! The AD maps of boxed closures (`vl_map_closure`, `vl_map_bundle` of runtime.c): for each
//! map the program uses, one function per boxed code, which unpacks the closure's environment,
//! maps it as lowered code maps an unboxed closure, and boxes the result. A code the map does
//! not apply to (or whose image is never boxed) has none: reaching it is an internal error of
//! the compiled program, as the analysis says it cannot happen. The element boxers of flat
//! arrays boxed by reference (`vl_box_elem`) are made here too: a map may box an array, and a
//! boxer may need a map.

use super::layout::{map_prim, static_zero};
use super::{Lowerer, Val, R};
use std::collections::BTreeSet;
use std::rc::Rc;
use vlad_core::Prim;
use vlad_flow::{Av, CodeId};
use vlad_ir::{FuncId, FuncKind, MapKind, Op, Operand, Rt, Stmt, Ty};

impl Lowerer<'_, '_> {
    /// The id the `n`th helper function will have.
    fn helper_id(&self, n: usize) -> FuncId {
        // After the specialised functions, the constants' initialisation and the entry point.
        FuncId((self.func_of.len() + 2 + n) as u32)
    }

    /// Makes the maps and element boxers the program needs (into `helpers`) and returns the
    /// dispatchers the runtime calls.
    pub(crate) fn closure_maps(&mut self) -> R<Vec<vlad_ir::Function>> {
        let mut done = BTreeSet::new();
        let mut entries: Vec<(MapKind, CodeId, FuncId)> = Vec::new();
        let mut codes: Vec<CodeId> = self.boxed.envs.keys().copied().collect();
        codes.sort();
        let mut boxers: Vec<FuncId> = Vec::new();
        loop {
            let todo: Vec<MapKind> = self.map_kinds.difference(&done).copied().collect();
            if todo.is_empty() {
                if boxers.len() == self.elem_boxers.len() {
                    break;
                }
                while boxers.len() < self.elem_boxers.len() {
                    let f = self.elem_boxer(boxers.len())?;
                    boxers.push(self.helper_id(self.helpers.len()));
                    self.helpers.push(f);
                }
                continue;
            }
            for kind in todo {
                done.insert(kind);
                for &c in &codes {
                    let (r, b) = self.in_function(|s| s.closure_map(kind, c));
                    if std::env::var_os("VLAD_C_DEBUG").is_some() {
                        match &r {
                            Ok(Some(_)) => {}
                            Ok(None) => eprintln!("map {kind:?} of code {}: none", c.0),
                            Err(e) => eprintln!("map {kind:?} of code {}: {}", c.0, e.reason),
                        }
                    }
                    // A map the lowering cannot make is left out: most (map, code) pairs are
                    // reached by no run. One whose environment the analysis mapped may be
                    // reached, and then the program is not compiled (the evaluator runs it)
                    // rather than stop there.
                    if let Err(e) = &r {
                        if met_map(&self.boxed, kind, c) {
                            return Err(e.clone());
                        }
                    }
                    if let Ok(Some(params)) = r {
                        let f = b.finish(
                            FuncKind::Helper {
                                name: format!("vl_map_{}_{}", kind.number(), c.0),
                                exported: false,
                            },
                            params,
                            Rc::from([Ty::Boxed]),
                        );
                        entries.push((kind, c, self.helper_id(self.helpers.len())));
                        self.helpers.push(f);
                    }
                }
            }
        }
        // The dispatchers.
        let mut out = Vec::new();
        let mut b = vlad_ir::Builder::new();
        let kind_v = b.named_var(Ty::I64, "kind".into());
        let v = b.named_var(Ty::Boxed, "v".into());
        let mut cases = Vec::new();
        for kind in done.iter().filter(|k| **k != MapKind::Bundle) {
            let arms = entries
                .iter()
                .filter(|e| e.0 == *kind)
                .map(|(_, c, f)| {
                    (
                        vec![c.0 as i64],
                        vec![Stmt::TailCall {
                            func: *f,
                            args: vec![Operand::Var(v)],
                        }],
                    )
                })
                .collect();
            cases.push((vec![kind.number() as i64], code_switch(&mut b, v, arms)));
        }
        b.push(Stmt::Switch {
            on: Operand::Var(kind_v),
            cases,
            default: Vec::new(),
        });
        b.effect(Op::Rt(
            Rt::FailNoMap,
            vec![Operand::Var(kind_v), Operand::Var(v)],
        ));
        b.push(Stmt::Return(vec![Operand::Var(v)]));
        out.push(b.finish(exported("vl_map_closure"), vec![kind_v, v], boxed()));

        let mut b = vlad_ir::Builder::new();
        let layout_v = b.named_var(Ty::I64, "layout".into());
        let a = b.named_var(Ty::Boxed, "a".into());
        let i = b.named_var(Ty::I64, "i".into());
        let mut cases = Vec::new();
        for (n, f) in boxers.iter().enumerate() {
            let ty = self.layout_of_boxer(n)?;
            let x = b.var(ty.clone(), "x");
            cases.push((
                vec![n as i64],
                vec![
                    Stmt::Let(vec![x], Op::Cast(Operand::Var(a), ty)),
                    Stmt::TailCall {
                        func: *f,
                        args: vec![Operand::Var(x), Operand::Var(i)],
                    },
                ],
            ));
        }
        b.push(Stmt::Switch {
            on: Operand::Var(layout_v),
            cases,
            default: Vec::new(),
        });
        b.effect(Op::Rt(
            Rt::FailInternal,
            vec![Operand::Str("an array of a layout with no boxer".into())],
        ));
        b.push(Stmt::Return(vec![Operand::Var(a)]));
        out.push(b.finish(exported("vl_box_elem"), vec![layout_v, a, i], boxed()));

        let mut b = vlad_ir::Builder::new();
        let p = b.named_var(Ty::Boxed, "p".into());
        let t = b.named_var(Ty::Boxed, "t".into());
        let arms = entries
            .iter()
            .filter(|e| e.0 == MapKind::Bundle)
            .map(|(_, c, f)| {
                (
                    vec![c.0 as i64],
                    vec![Stmt::TailCall {
                        func: *f,
                        args: vec![Operand::Var(p), Operand::Var(t)],
                    }],
                )
            })
            .collect();
        let switch = code_switch(&mut b, p, arms);
        for s in switch {
            b.push(s);
        }
        b.effect(Op::Rt(
            Rt::FailInternal,
            vec![Operand::Str(
                "bundle met a boxed procedure it was not compiled for".into(),
            )],
        ));
        b.push(Stmt::Return(vec![Operand::Var(p)]));
        out.push(b.finish(exported("vl_map_bundle"), vec![p, t], boxed()));
        Ok(out)
    }

    /// The array type element boxer `n` takes.
    fn layout_of_boxer(&self, n: usize) -> R<Ty> {
        let (e, _) = &self.elem_boxers[n];
        Ok(Ty::Array(self.layout(&e.shape())?.into()))
    }

    /// The body of the map `kind` of boxed closures of code `c` (into `self.b`), and its
    /// parameters; `None` where the map does not apply.
    fn closure_map(&mut self, kind: MapKind, c: CodeId) -> R<Option<Vec<vlad_ir::Var>>> {
        let summary = self.boxed.envs[&c].clone();
        let bundle = kind == MapKind::Bundle;
        let first = self
            .b
            .named_var(Ty::Boxed, (if bundle { "p" } else { "v" }).into());
        let mut params = vec![first];
        let clo = self.unpack_closure(c, &summary, &Operand::Var(first))?;
        let Some(prim) = map_prim(kind) else {
            if kind != MapKind::ZeroSensitivity {
                return Ok(None);
            }
            // The zero sensitivity of a reverse closure, computed in full.
            let zero = Av::Zero(Rc::new(clo.av.clone()));
            let leaves = if static_zero(&clo.av) {
                Vec::new()
            } else {
                clo.leaves.clone()
            };
            let forced = self.force(Val { av: zero, leaves })?;
            if forced.av == Av::Bottom {
                return Ok(None);
            }
            let b = self.boxed_val(&forced)?;
            self.b.push(Stmt::Return(vec![b]));
            return Ok(Some(params));
        };
        let (arg, tangent) = if bundle {
            // The tangent: a closure of the perturbation-transformed code.
            let Ok(t_av) = self.an.apply(&Av::Prim(Prim::Perturb), &clo.av) else {
                return Ok(None);
            };
            let Av::Closure(tc, _) = t_av else {
                return Ok(None);
            };
            let Some(t_summary) = self.boxed.envs.get(&tc).cloned() else {
                return Ok(None);
            };
            let second = self.b.named_var(Ty::Boxed, "t".into());
            params.push(second);
            let t = self.unpack_closure(tc, &t_summary, &Operand::Var(second))?;
            (Av::pair(clo.av.clone(), t.av.clone()), Some(t))
        } else {
            (clo.av.clone(), None)
        };
        let r = match self.an.apply(&Av::Prim(prim), &arg) {
            Ok(r) if r != Av::Bottom => r,
            _ => return Ok(None),
        };
        if std::env::var_os("VLAD_C_DEBUG").is_some() {
            eprintln!("map {kind:?} of {:?}\n  gives {r:?}", clo.av);
        }
        let leaves = match (kind, tangent) {
            (MapKind::Tag(tag), _) => self.tag_leaves(&clo, tag)?,
            (MapKind::Untag(tag), _) => self.untag_leaves(&clo, tag, prim.name())?,
            (MapKind::Split(tangent), _) => self.split_forward(&clo, tangent)?,
            (MapKind::SZero, _) => self.zero_leaves(&clo, true)?,
            // The shallow primal keeps a closure's environment as it is.
            (MapKind::ShallowPrimal, _) => clo.leaves.clone(),
            (MapKind::Bundle, Some(t)) => self.bundle(&clo, &t)?,
            (MapKind::Bundle | MapKind::ZeroSensitivity, _) => unreachable!("handled above"),
        };
        if leaves.len() != self.layout(&r)?.len() {
            return Ok(None);
        }
        let b = self.boxed_val(&Val { av: r, leaves })?;
        self.b.push(Stmt::Return(vec![b]));
        Ok(Some(params))
    }
}

/// A `switch` on the code of the boxed closure `v`.
fn code_switch(
    b: &mut vlad_ir::Builder,
    v: vlad_ir::Var,
    cases: Vec<(Vec<i64>, Vec<Stmt>)>,
) -> Vec<Stmt> {
    let code = b.var(Ty::I64, "c");
    vec![
        Stmt::Let(vec![code], Op::CodeOf(Operand::Var(v))),
        Stmt::Switch {
            on: Operand::Var(code),
            cases,
            default: Vec::new(),
        },
    ]
}

fn exported(name: &str) -> FuncKind {
    FuncKind::Helper {
        name: name.into(),
        exported: true,
    }
}

fn boxed() -> vlad_ir::Layout {
    Rc::from([Ty::Boxed])
}

/// Whether the analysis met the map `kind` of a boxed closure of code `c` (its AD maps of
/// boxed callees: tags, untags and the split of a bundle; the other kinds are not recorded).
fn met_map(boxed: &vlad_flow::Boxed, kind: MapKind, c: CodeId) -> bool {
    use vlad_flow::MapOp;
    let op = match kind {
        MapKind::Tag(t) => MapOp::Tag(t),
        MapKind::Untag(t) => MapOp::Untag(t),
        MapKind::Split(tangent) => MapOp::Split(tangent),
        _ => return false,
    };
    boxed.mapped.contains(&(op, c))
}
