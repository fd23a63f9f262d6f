//! Unit tests of the IR: the verifier accepts well-formed programs and rejects malformed ones,
//! and each pass does what it says on small programs.

use crate::builder::Builder;
use crate::ir::*;
use crate::passes;
use crate::rt::Rt;
use crate::verify::verify;
use std::rc::Rc;

fn layout(tys: &[Ty]) -> Layout {
    tys.iter().cloned().collect()
}

fn spec(key: usize) -> FuncKind {
    FuncKind::Specialised { key }
}

/// `let v: ty = load array[index].0`, a fresh variable named `PREFIX<n>`.
fn load(b: &mut Builder, ty: Ty, prefix: &str, array: Var, index: Operand) -> Var {
    b.let1(
        ty,
        prefix,
        Op::Load {
            array: Operand::Var(array),
            index,
            slot: 0,
        },
    )
}

/// `f0(a: f64) -> f64 { return a + 1 }`.
fn add_one() -> Function {
    let mut b = Builder::new();
    let a = b.named_var(Ty::F64, "a0".into());
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(a), Operand::F64(1.0)),
    );
    b.push(Stmt::Return(vec![Operand::Var(t)]));
    b.finish(spec(0), vec![a], layout(&[Ty::F64]))
}

/// `acc[i] := acc[i] + 1`, in place.
fn add_one_in_place(b: &mut Builder, acc: Var, i: Var) {
    let y = load(b, Ty::F64, "y", acc, Operand::Var(i));
    let y1 = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FAdd, Operand::Var(y), Operand::F64(1.0)),
    );
    b.push(Stmt::Store {
        array: Operand::Var(acc),
        index: Operand::Var(i),
        slot: 0,
        value: Operand::Var(y1),
    });
}

fn program(funcs: Vec<Function>) -> Program {
    Program {
        funcs,
        ..Program::default()
    }
}

#[test]
fn a_well_formed_program_verifies_and_prints() {
    let p = program(vec![add_one()]);
    verify(&p).expect("well formed");
    let text = crate::print::program(&p);
    assert!(text.contains("fn f0(a0: f64) -> (f64) {"), "{text}");
    assert!(text.contains("t1: f64 = fadd a0, 1.0"), "{text}");
    assert!(text.contains("return t1"), "{text}");
}

#[test]
fn the_verifier_rejects_a_wrong_type() {
    let mut f = add_one();
    // `a + #t`: a boolean where a real is needed.
    f.body[0] = Stmt::Let(
        vec![Var(1)],
        Op::Binary(BinOp::FAdd, Operand::Var(Var(0)), Operand::Bool(true)),
    );
    let e = verify(&program(vec![f])).unwrap_err();
    assert!(e.message.contains("expected f64, got bool"), "{e}");
}

#[test]
fn the_verifier_rejects_an_unknown_callee() {
    let mut f = add_one();
    f.body[0] = Stmt::Let(
        vec![Var(1)],
        Op::Call {
            func: FuncId(7),
            args: vec![Operand::Var(Var(0))],
            guard: None,
        },
    );
    let e = verify(&program(vec![f])).unwrap_err();
    assert!(e.message.contains("f7, which does not exist"), "{e}");
}

/// `if #t { t = 1.0 } ; return t`: t used out of its scope.
fn use_out_of_scope() -> Function {
    let mut b = Builder::new();
    b.open();
    let t = b.let1(Ty::F64, "t", Op::Copy(Operand::F64(1.0)));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Bool(true),
        then,
        els: vec![],
    });
    b.push(Stmt::Return(vec![Operand::Var(t)]));
    b.finish(spec(0), vec![], layout(&[Ty::F64]))
}

#[test]
fn the_verifier_rejects_a_use_out_of_scope() {
    let e = verify(&program(vec![use_out_of_scope()])).unwrap_err();
    assert!(e.message.contains("t0 is used out of its scope"), "{e}");
}

#[test]
fn the_verifier_rejects_a_variable_defined_twice_and_a_bad_runtime_call() {
    let mut f = add_one();
    f.body.insert(1, f.body[0].clone());
    let e = verify(&program(vec![f])).unwrap_err();
    assert!(e.message.contains("defined twice"), "{e}");
    let mut f = add_one();
    f.body[0] = Stmt::Let(vec![Var(1)], Op::Rt(Rt::WriteReal, vec![Operand::Null]));
    let e = verify(&program(vec![f])).unwrap_err();
    assert!(e.message.contains("argument 0 of vl_write_real"), "{e}");
}

#[test]
fn a_call_whose_result_is_returned_becomes_a_tail_call() {
    let mut b = Builder::new();
    let a = b.named_var(Ty::F64, "a0".into());
    let r = b.var(Ty::F64, "t");
    b.push(Stmt::Let(
        vec![r],
        Op::Call {
            func: FuncId(0),
            args: vec![Operand::Var(a)],
            guard: None,
        },
    ));
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    let caller = b.finish(spec(1), vec![a], layout(&[Ty::F64]));
    let mut p = program(vec![add_one(), caller]);
    passes::tail::run(&mut p);
    verify(&p).unwrap();
    assert_eq!(
        p.funcs[1].body,
        vec![Stmt::TailCall {
            func: FuncId(0),
            args: vec![Operand::Var(a)]
        }]
    );
}

/// `f0(a: f64) -> boxed { return box a }`: a function that allocates.
fn boxer() -> Function {
    let mut b = Builder::new();
    let a = b.named_var(Ty::F64, "a0".into());
    let t = b.let1(Ty::Boxed, "b", Op::Rt(Rt::BoxReal, vec![Operand::Var(a)]));
    b.push(Stmt::Return(vec![Operand::Var(t)]));
    b.finish(spec(0), vec![a], layout(&[Ty::Boxed]))
}

#[test]
fn a_call_that_allocates_and_returns_no_pointer_is_marked() {
    // f1 calls f0 (allocates) for a boxed result, then f2 (allocates, through f0) for a real,
    // then f3 (does not allocate).
    let call = |b: &mut Builder, f: u32, ty: Ty| {
        let r = b.var(ty, "t");
        b.push(Stmt::Let(
            vec![r],
            Op::Call {
                func: FuncId(f),
                args: vec![Operand::F64(1.0)],
                guard: None,
            },
        ));
        r
    };
    let mut b = Builder::new();
    call(&mut b, 0, Ty::Boxed);
    let x = call(&mut b, 2, Ty::F64);
    call(&mut b, 3, Ty::F64);
    b.push(Stmt::Return(vec![Operand::Var(x)]));
    let f1 = b.finish(spec(1), vec![], layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(Ty::F64, "a0".into());
    call(&mut b, 0, Ty::Boxed);
    b.push(Stmt::Return(vec![Operand::Var(a)]));
    let f2 = b.finish(spec(2), vec![a], layout(&[Ty::F64]));
    let mut f3 = add_one();
    f3.kind = spec(3);
    let mut p = program(vec![boxer(), f1, f2, f3]);
    passes::marks::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(1));
    // Only the call of f2 is bracketed.
    assert_eq!(text.matches("= mark").count(), 1, "{text}");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines.iter().position(|l| l.contains("call f2")).unwrap();
    assert!(lines[at - 1].ends_with("= mark"), "{text}");
    assert!(lines[at + 1].starts_with("release"), "{text}");
}

#[test]
fn a_loop_carrying_a_pointer_free_array_copies_it_down_to_its_first_entry_mark() {
    // f0(a: array(f64), n: f64): if n > 0 { b = new array; return f0(b, n - 1) } else
    // { return n }
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a0".into());
    let n = b.named_var(Ty::F64, "a1".into());
    let c = b.let1(
        Ty::Bool,
        "t",
        Op::Binary(BinOp::FGt, Operand::Var(n), Operand::F64(0.0)),
    );
    b.open();
    let fresh = b.let1(
        arr.clone(),
        "b",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::I64(3),
        },
    );
    let m = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FSub, Operand::Var(n), Operand::F64(1.0)),
    );
    b.push(Stmt::TailCall {
        func: FuncId(0),
        args: vec![Operand::Var(fresh), Operand::Var(m)],
    });
    let then = b.close();
    b.open();
    b.push(Stmt::Return(vec![Operand::Var(n)]));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els,
    });
    let f = b.finish(spec(0), vec![a, n], layout(&[Ty::F64]));
    let mut p = program(vec![f]);
    passes::carry::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The mark once, then a loop; the self call copies the new array down and continues.
    assert!(text.contains("entry"), "{text}");
    assert!(text.contains("loop {"), "{text}");
    assert!(text.contains("release entry"), "{text}");
    assert!(text.contains("carrying b"), "{text}");
    assert!(text.contains("continue"), "{text}");
    assert!(!text.contains("return call"), "{text}");
}

/// `f0(a: boxed, n: f64) -> f64 { if n > 0 { return f0(pair(box n, a), n - 1) } else
/// { return n } }`: a loop that carries a boxed list it grows.
fn list_loop() -> Function {
    let mut b = Builder::new();
    let a = b.named_var(Ty::Boxed, "a0".into());
    let n = b.named_var(Ty::F64, "a1".into());
    let c = b.let1(
        Ty::Bool,
        "t",
        Op::Binary(BinOp::FGt, Operand::Var(n), Operand::F64(0.0)),
    );
    b.open();
    let x = b.let1(Ty::Boxed, "b", Op::Rt(Rt::BoxReal, vec![Operand::Var(n)]));
    let l = b.let1(
        Ty::Boxed,
        "b",
        Op::Rt(
            Rt::BoxPair,
            vec![Operand::I64(0), Operand::Var(x), Operand::Var(a)],
        ),
    );
    let m = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FSub, Operand::Var(n), Operand::F64(1.0)),
    );
    b.push(Stmt::TailCall {
        func: FuncId(0),
        args: vec![Operand::Var(l), Operand::Var(m)],
    });
    let then = b.close();
    b.open();
    b.push(Stmt::Return(vec![Operand::Var(n)]));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els,
    });
    b.finish(spec(0), vec![a, n], layout(&[Ty::F64]))
}

#[test]
fn a_loop_carrying_a_boxed_value_collects_it_at_its_back_edge() {
    let mut p = program(vec![list_loop()]);
    passes::carry::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The mark and the budget once, then a loop whose back edge collects the new list.
    assert!(text.contains("entry"), "{text}");
    assert!(text.contains(":= 0i"), "{text}");
    assert!(text.contains("loop {"), "{text}");
    assert!(text.contains("= collect entry"), "{text}");
    assert!(text.contains("keeping b"), "{text}");
    assert!(text.contains("continue"), "{text}");
    assert!(!text.contains("return call"), "{text}");
}

#[test]
fn a_cycle_of_tail_calls_carrying_a_boxed_value_becomes_one_loop_that_collects() {
    // f0 and f1 are list_loop calling each other: f0 -> f1 -> f0 ...
    let mut f0 = list_loop();
    let mut f1 = list_loop();
    for (f, other) in [(&mut f0, 1), (&mut f1, 0)] {
        walk_mut(&mut f.body, &mut |s| {
            if let Stmt::TailCall { func, .. } = s {
                *func = FuncId(other);
            }
        });
    }
    f1.kind = spec(1);
    let mut p = program(vec![f0, f1]);
    verify(&p).unwrap();
    passes::carry::run(&mut p);
    verify(&p).unwrap();
    assert_eq!(p.funcs.len(), 3);
    let text = crate::print::function(&p, FuncId(2));
    assert!(text.contains("the loop of f0, f1"), "{text}");
    assert!(text.contains("switch sel"), "{text}");
    assert!(text.contains("= collect entry"), "{text}");
    assert!(text.contains("continue"), "{text}");
    assert!(!text.contains("return call"), "{text}");
    // The members call the loop, saying which of them runs.
    for k in 0..2 {
        let text = crate::print::function(&p, FuncId(k));
        assert!(text.contains(&format!("return call f2({k}i, ")), "{text}");
    }
}

#[test]
fn an_ifold_carrying_a_boxed_accumulator_collects_it_after_each_step() {
    // s = ifold from () count 4 { x = box i; y = pair(x, s) } next y; return s
    let mut b = Builder::new();
    let s = b.var(Ty::Boxed, "s");
    let i = b.var(Ty::I64, "i");
    b.open();
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let x = b.let1(Ty::Boxed, "x", Op::Rt(Rt::BoxReal, vec![Operand::Var(r)]));
    let y = b.let1(
        Ty::Boxed,
        "y",
        Op::Rt(
            Rt::BoxPair,
            vec![Operand::I64(0), Operand::Var(x), Operand::Var(s)],
        ),
    );
    let body = b.close();
    let nil = b.let1(Ty::Boxed, "n", Op::Rt(Rt::Nil, vec![]));
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::Var(nil)],
        count: Operand::I64(4),
        index: i,
        body,
        next: vec![Operand::Var(y)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let f = b.finish(spec(0), vec![], layout(&[Ty::Boxed]));
    let mut p = program(vec![f]);
    passes::carry::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| l.contains("= ifold"))
        .expect(&text);
    assert!(lines[at - 3].ends_with("= mark"), "{text}");
    assert!(text.contains("= collect m"), "{text}");
    assert!(text.contains("keeping y"), "{text}");
    passes::loops::run(&mut p);
    verify(&p).unwrap();
}

#[test]
fn the_verifier_rejects_a_pointer_live_after_a_release_that_does_not_keep_it() {
    // m = mark; x = box 1; [c, g = collect m budget 0 keeping x;] release m; return x
    let program_with = |collect: bool, use_copy: bool| {
        let mut b = Builder::new();
        let m = b.let1(Ty::Mark, "m", Op::Mark);
        let x = b.let1(Ty::Boxed, "x", Op::Rt(Rt::BoxReal, vec![Operand::F64(1.0)]));
        let mut out = x;
        if collect {
            let c = b.var(Ty::Boxed, "c");
            let g = b.var(Ty::I64, "g");
            b.push(Stmt::Let(
                vec![c, g],
                Op::Collect {
                    mark: Operand::Var(m),
                    budget: Operand::I64(0),
                    values: vec![Operand::Var(x)],
                },
            ));
            if use_copy {
                out = c;
            }
        } else {
            b.push(Stmt::Release(Operand::Var(m)));
        }
        b.push(Stmt::Return(vec![Operand::Var(out)]));
        program(vec![b.finish(spec(0), vec![], layout(&[Ty::Boxed]))])
    };
    let e = verify(&program_with(false, false)).unwrap_err();
    assert!(
        e.message.contains("x1 is live after a release to m0"),
        "{e}"
    );
    let e = verify(&program_with(true, false)).unwrap_err();
    assert!(
        e.message.contains("x1 is live after a release to m0"),
        "{e}"
    );
    verify(&program_with(true, true)).unwrap();
}

#[test]
fn build_and_ifold_lower_to_counted_loops() {
    // b = build array(f64) count 4 { x = i as f64 } element x;
    // s = ifold from 0.0 count 4 { y = load b[i] ; z = s + y } next z; return s
    let mut b = Builder::new();
    let arr = b.var(Ty::Array(layout(&[Ty::F64])), "b");
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let body = b.close();
    b.push(Stmt::Build {
        array: arr,
        layout: layout(&[Ty::F64]),
        count: Operand::I64(4),
        index: i,
        body,
        elem: vec![Operand::Var(x)],
    });
    let s = b.var(Ty::F64, "s");
    let j = b.var(Ty::I64, "i");
    b.open();
    let y = load(&mut b, Ty::F64, "y", arr, Operand::Var(j));
    let z = b.let1(
        Ty::F64,
        "z",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(y)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::I64(4),
        index: j,
        body,
        next: vec![Operand::Var(z)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let f = b.finish(spec(0), vec![], layout(&[Ty::F64]));
    let mut p = program(vec![f]);
    verify(&p).unwrap();
    passes::loops::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("new array(f64) count 4i"), "{text}");
    assert!(text.contains("store b0[i1].0 = x2"), "{text}");
    assert!(text.contains("var s3: f64"), "{text}");
    assert!(text.contains("s3 := z6"), "{text}");
    assert!(!text.contains("build") && !text.contains("ifold"), "{text}");
}

/// `if ok {} else { rt vl_length_fail(op, got, want) }`, the check of a length that a vector
/// operation makes, pushed into the current block.
fn push_length_check(b: &mut Builder, ok: Var, op: &str, got: Operand, want: Operand) {
    b.open();
    b.effect(Op::Rt(
        Rt::LengthFail,
        vec![Operand::Str(op.into()), got, want],
    ));
    let fail = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(ok),
        then: vec![],
        els: fail,
    });
}

/// `f0(n: f64, k: f64) -> f64 { if n > 0 { r = f0(n - k, k); return r * n } else { return 1 } }`.
fn factorial() -> Function {
    let mut b = Builder::new();
    let n = b.named_var(Ty::F64, "a0".into());
    let k = b.named_var(Ty::F64, "a1".into());
    let c = b.let1(
        Ty::Bool,
        "t",
        Op::Binary(BinOp::FGt, Operand::Var(n), Operand::F64(0.0)),
    );
    b.open();
    let m = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FSub, Operand::Var(n), Operand::Var(k)),
    );
    let dead = b.let1(
        Ty::F64,
        "d",
        Op::Binary(BinOp::FMul, Operand::Var(m), Operand::F64(2.0)),
    );
    let r = b.var(Ty::F64, "t");
    b.push(Stmt::Let(
        vec![r],
        Op::Call {
            func: FuncId(0),
            args: vec![Operand::Var(m), Operand::Var(k)],
            guard: None,
        },
    ));
    let y = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FMul, Operand::Var(r), Operand::Var(n)),
    );
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let then = b.close();
    b.open();
    b.push(Stmt::Return(vec![Operand::F64(1.0)]));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els,
    });
    let _ = dead;
    b.finish(spec(0), vec![n, k], layout(&[Ty::F64]))
}

#[test]
fn a_non_tail_recursive_function_gets_a_machine_with_its_live_variables_in_the_frame() {
    let mut p = program(vec![factorial()]);
    let stats = passes::machines::run(&mut p, 1000);
    assert_eq!(stats.machines, 1);
    verify(&p).unwrap();
    // The machine (f1) and the entry of its member (f2).
    let FuncKind::Machine(m) = &p.funcs[1].kind else {
        panic!("no machine")
    };
    let mb = &m.members[0];
    let names: Vec<&str> = mb.frame.iter().map(|v| p.funcs[1].name(*v)).collect();
    // `n`, and nothing else: `k`, `t` (n - k) and `d` are dead after the call (a parameter
    // that is arrives in a C local), and the call's result is defined by it.
    assert_eq!(names, ["a0_0"]);
    assert_eq!(mb.resumes, 1);
    assert!(matches!(p.funcs[2].kind, FuncKind::MachineEntry { .. }));
    // The native call is guarded by the entry.
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("call f0(t3, a1) (deep: f2)"), "{text}");
    // Too large: no machine.
    let mut p = program(vec![factorial()]);
    let stats = passes::machines::run(&mut p, 3);
    assert_eq!(stats.too_large, 1);
    assert_eq!(p.funcs.len(), 1);
}

#[test]
fn the_verifier_rejects_a_machine_whose_frame_misses_a_live_variable() {
    let mut p = program(vec![factorial()]);
    passes::machines::run(&mut p, 1000);
    let FuncKind::Machine(m) = &p.funcs[1].kind else {
        panic!("no machine")
    };
    let mut m = (**m).clone();
    m.members[0].frame.clear();
    p.funcs[1].kind = FuncKind::Machine(Rc::new(m));
    let e = verify(&p).unwrap_err();
    assert!(e.message.contains("not in its frame"), "{e}");
}

#[test]
fn unions_are_typed() {
    let u = Ty::Union(Rc::from([
        layout(&[Ty::F64]),
        layout(&[Ty::Boxed, Ty::F64]),
    ]));
    let mut b = Builder::new();
    let x = b.let1(
        u.clone(),
        "u",
        Op::MakeUnion {
            ty: u.clone(),
            variant: 1,
            fields: vec![Operand::Null, Operand::F64(2.0)],
        },
    );
    let tag = b.let1(Ty::I64, "k", Op::UnionTag(Operand::Var(x)));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::UnionField {
            value: Operand::Var(x),
            variant: 1,
            index: 1,
        },
    );
    let _ = tag;
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let f = b.finish(spec(0), vec![], layout(&[Ty::F64]));
    verify(&program(vec![f.clone()])).unwrap();
    let mut bad = f;
    bad.body[2] = Stmt::Let(
        vec![Var(2)],
        Op::UnionField {
            value: Operand::Var(Var(0)),
            variant: 0,
            index: 1,
        },
    );
    let e = verify(&program(vec![bad])).unwrap_err();
    assert!(e.message.contains("no field 1 of variant 0"), "{e}");
}

#[test]
fn a_call_that_sets_globals_is_never_marked() {
    // f1 (the constants' initialisation) boxes a constant into a global; f2 calls it, then f0.
    let mut b = Builder::new();
    let x = b.let1(Ty::Boxed, "b", Op::Rt(Rt::BoxReal, vec![Operand::F64(1.0)]));
    b.push(Stmt::SetGlobal(GlobalId(0), Operand::Var(x)));
    b.push(Stmt::Return(vec![]));
    let init = b.finish(spec(1), vec![], layout(&[]));
    let mut b = Builder::new();
    b.effect(Op::Call {
        func: FuncId(1),
        args: vec![],
        guard: None,
    });
    let t = b.var(Ty::Boxed, "t");
    b.push(Stmt::Let(
        vec![t],
        Op::Call {
            func: FuncId(0),
            args: vec![Operand::F64(2.0)],
            guard: None,
        },
    ));
    // Then a tail call that passes on nothing allocated here: no release before it either.
    b.push(Stmt::TailCall {
        func: FuncId(3),
        args: vec![],
    });
    let main = b.finish(spec(2), vec![], layout(&[]));
    let mut b = Builder::new();
    b.push(Stmt::Return(vec![]));
    let last = b.finish(spec(3), vec![], layout(&[]));
    let mut p = program(vec![boxer(), init, main, last]);
    p.globals.push(Global {
        name: "vl_k0".into(),
        ty: Ty::Boxed,
    });
    passes::marks::run(&mut p);
    passes::carry::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(2));
    // The global outlives the call: no mark around it (and none around the call of f0, whose
    // result is a pointer), and no release before the tail call.
    assert!(!text.contains("mark"), "{text}");
    assert!(!text.contains("release"), "{text}");
}

/// `f1(e, u: array(f64), acc, r: f64) -> f64`: `acc + (get e r) - (get u r)`, each `get`
/// checking its real index as the lowering writes it; and `f0(a, b)`, the `ifold` over the
/// length of `a` whose step is `f1(a, b, acc, i)`.
fn fold_of_gets() -> Program {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let e = b.named_var(arr.clone(), "e".into());
    let u = b.named_var(arr.clone(), "u".into());
    let acc = b.named_var(Ty::F64, "acc".into());
    let r = b.named_var(Ty::F64, "r".into());
    let get = |b: &mut Builder, site: u32, a: Var| {
        b.push(Stmt::Site(site));
        let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
        let k = b.let1(
            Ty::I64,
            "k",
            Op::Rt(
                Rt::Index,
                vec![Operand::I64(site as i64), Operand::Var(r), Operand::Var(n)],
            ),
        );
        load(b, Ty::F64, "x", a, Operand::Var(k))
    };
    let x = get(&mut b, 1, e);
    let y = get(&mut b, 2, u);
    b.push(Stmt::Site(3));
    let d = b.let1(
        Ty::F64,
        "d",
        Op::Binary(BinOp::FSub, Operand::Var(x), Operand::Var(y)),
    );
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(acc), Operand::Var(d)),
    );
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let step = b.finish(spec(1), vec![e, u, acc, r], layout(&[Ty::F64]));

    let mut b = Builder::new();
    let a0 = b.named_var(arr.clone(), "a0".into());
    let a1 = b.named_var(arr, "a1".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a0)));
    let c = b.let1(Ty::F64, "c", Op::Unary(UnOp::I64ToF64, Operand::Var(n)));
    b.effect(Op::Rt(
        Rt::CheckCount,
        vec![
            Operand::I64(4),
            Operand::Str("ifold".into()),
            Operand::Str("count".into()),
            Operand::Var(c),
        ],
    ));
    let count = b.let1(Ty::I64, "count", Op::Unary(UnOp::F64ToI64, Operand::Var(c)));
    let acc = b.var(Ty::F64, "acc");
    let i = b.var(Ty::I64, "i");
    b.open();
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Call {
            func: FuncId(1),
            args: vec![a0, a1, acc, r].into_iter().map(Operand::Var).collect(),
            guard: None,
        },
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![acc],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(count),
        index: i,
        body,
        next: vec![Operand::Var(t)],
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    let main = b.finish(spec(0), vec![a0, a1], layout(&[Ty::F64]));
    let site = Site {
        prefix: "t.vlad:1:1: error: ".into(),
        excerpt: None,
    };
    Program {
        sites: vec![site; 5],
        ..program(vec![main, step])
    }
}

#[test]
fn inlining_a_step_lets_the_loop_prove_its_index_checks() {
    let mut p = fold_of_gets();
    verify(&p).unwrap();
    passes::inline::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("call f1"), "{text}");
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The count is the length itself: no check, no round trip through a real.
    assert!(!text.contains("vl_check_count"), "{text}");
    assert!(!text.contains("i64tof64"), "{text}");
    assert!(text.contains("count n"), "{text}");
    // `get a0 i` is proved by the loop (its count is a0's length); `get a1 i` is not (a1 may be
    // shorter) and is checked as an integer.
    assert!(!text.contains("vl_index("), "{text}");
    assert_eq!(text.matches("rt vl_index_i(2i, i").count(), 1, "{text}");
    // The length of a1 does not change in the loop: it is taken once, before it.
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("= length a1") < at("= ifold"), "{text}");
    // After the loops are lowered, the loop runs in two versions: a1 long enough, no check.
    let mut lowered = p.clone();
    passes::loops::run(&mut lowered);
    passes::version::run(&mut lowered);
    verify(&lowered).unwrap();
    let text = crate::print::function(&lowered, FuncId(0));
    assert_eq!(text.matches("for ").count(), 2, "{text}");
    assert_eq!(text.matches("vl_index_i").count(), 1, "{text}");
    let short = text.lines().find(|l| l.contains("= ilt")).expect(&text);
    assert!(short.ends_with("= ilt n7_16, n2"), "{text}");
    // Site 1 guarded only the check that is gone: the next site replaces it.
    passes::sites::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("site 1\n"), "{text}");
    assert!(text.contains("site 2\n"), "{text}");
    assert!(text.contains("site 3\n"), "{text}");
    passes::optimize(&mut fold_of_gets(), passes::Options::default()).unwrap();
}

#[test]
fn inlining_leaves_allocating_and_recursive_functions_alone() {
    // The step allocates (a boxed real): its call is where `marks` releases what it allocated.
    let mut p = fold_of_gets();
    let step = p.func_mut(FuncId(1));
    let boxed = step.new_var(Ty::Boxed, "b");
    step.body.insert(
        0,
        Stmt::Let(vec![boxed], Op::Rt(Rt::BoxReal, vec![Operand::F64(1.0)])),
    );
    passes::inline::run(&mut p);
    assert!(crate::print::function(&p, FuncId(0)).contains("call f1"));
    // The step calls itself (never, but the call graph says it may).
    let mut p = fold_of_gets();
    let step = p.func_mut(FuncId(1));
    let t = step.new_var(Ty::F64, "t");
    let args: Vec<Operand> = step.params.iter().copied().map(Operand::Var).collect();
    step.body.insert(
        0,
        Stmt::If {
            cond: Operand::Bool(false),
            then: vec![
                Stmt::Let(
                    vec![t],
                    Op::Call {
                        func: FuncId(1),
                        args,
                        guard: None,
                    },
                ),
                Stmt::Return(vec![Operand::Var(t)]),
            ],
            els: vec![],
        },
    );
    verify(&p).unwrap();
    passes::inline::run(&mut p);
    assert!(crate::print::function(&p, FuncId(0)).contains("call f1"));
}

#[test]
fn a_callee_returning_from_branches_is_inlined_as_assignments() {
    // f1(x) { if x < 0 { return 0 - x } else { return x } }; f0(y) { r = f1(y); return r + 1 }
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let neg = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FLt, Operand::Var(x), Operand::F64(0.0)),
    );
    b.open();
    let m = b.let1(
        Ty::F64,
        "m",
        Op::Binary(BinOp::FSub, Operand::F64(0.0), Operand::Var(x)),
    );
    b.push(Stmt::Return(vec![Operand::Var(m)]));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(neg),
        then,
        els: vec![Stmt::Return(vec![Operand::Var(x)])],
    });
    let abs = b.finish(spec(1), vec![x], layout(&[Ty::F64]));
    let mut b = Builder::new();
    let y = b.named_var(Ty::F64, "y".into());
    let r = b.let1(
        Ty::F64,
        "r",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::Var(y)],
            guard: None,
        },
    );
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(r), Operand::F64(1.0)),
    );
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let main = b.finish(spec(0), vec![y], layout(&[Ty::F64]));
    let mut p = program(vec![main, abs]);
    passes::inline::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("call"), "{text}");
    assert!(text.contains("var r1: f64"), "{text}");
    assert_eq!(text.matches("r1 := ").count(), 2, "{text}");
}

#[test]
fn simplification_shares_only_what_cannot_change() {
    // a = x + 1; var v; v := x; b = v * 2; v := a; c = v * 2; d = x + 1; return a, b, c, d
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let add = || Op::Binary(BinOp::FAdd, Operand::Var(x), Operand::F64(1.0));
    let a = b.let1(Ty::F64, "a", add());
    let v = b.var(Ty::F64, "v");
    b.push(Stmt::Declare(vec![v]));
    b.push(Stmt::Set(v, Operand::Var(x)));
    let twice = || Op::Binary(BinOp::FMul, Operand::Var(v), Operand::F64(2.0));
    let b1 = b.let1(Ty::F64, "b", twice());
    b.push(Stmt::Set(v, Operand::Var(a)));
    let c = b.let1(Ty::F64, "c", twice());
    let d = b.let1(Ty::F64, "d", add());
    let unused = b.let1(Ty::F64, "u", add());
    let _ = unused;
    b.push(Stmt::Return(
        [a, b1, c, d].into_iter().map(Operand::Var).collect(),
    ));
    let f = b.finish(
        spec(0),
        vec![x],
        layout(&[Ty::F64, Ty::F64, Ty::F64, Ty::F64]),
    );
    let mut p = program(vec![f]);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert_eq!(text.matches("fadd x, 1.0").count(), 1, "{text}");
    assert_eq!(text.matches("fmul v2, 2.0").count(), 2, "{text}");
    assert!(text.contains("return a1, b3, c4, a1"), "{text}");
}

#[test]
fn a_small_array_read_at_constant_indices_becomes_scalars() {
    // b = build 3 (i -> 2 i); s = ifold (s j -> s + b[j]) 0 3; return s: all of it folds.
    let arr = layout(&[Ty::F64]);
    let mut b = Builder::new();
    let i = b.var(Ty::I64, "i");
    b.open();
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let x = b.let1(
        Ty::F64,
        "x",
        Op::Binary(BinOp::FMul, Operand::Var(r), Operand::F64(2.0)),
    );
    let body = b.close();
    let a = b.var(Ty::Array(arr.clone()), "a");
    b.push(Stmt::Build {
        array: a,
        layout: arr,
        count: Operand::I64(3),
        index: i,
        body,
        elem: vec![Operand::Var(x)],
    });
    let s = b.var(Ty::F64, "s");
    let j = b.var(Ty::I64, "j");
    b.open();
    let y = load(&mut b, Ty::F64, "y", a, Operand::Var(j));
    let n = b.let1(
        Ty::F64,
        "n",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(y)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::I64(3),
        index: j,
        body,
        next: vec![Operand::Var(n)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let mut p = program(vec![b.finish(spec(0), vec![], layout(&[Ty::F64]))]);
    verify(&p).unwrap();
    passes::scalars::unroll(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("store a3[2i].0 = 4.0"), "{text}");
    assert!(text.contains("load a3[2i].0"), "{text}");
    passes::scalars::replace(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("build") && !text.contains("ifold"), "{text}");
    assert!(
        !text.contains("load") && !text.contains("new array"),
        "{text}"
    );
    assert!(text.contains("return 6.0"), "{text}");
}

#[test]
fn a_branch_on_a_constant_is_replaced_by_the_branch_taken() {
    // c = 1 < 2; if c { return 1 } else { return x }
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FLt, Operand::F64(1.0), Operand::F64(2.0)),
    );
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Return(vec![Operand::F64(1.0)])],
        els: vec![Stmt::Return(vec![Operand::Var(x)])],
    });
    let mut p = program(vec![b.finish(spec(0), vec![x], layout(&[Ty::F64]))]);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("if"), "{text}");
    assert!(text.contains("return 1.0"), "{text}");
    // 0 / 0 is left to C (a NaN's bits are the hardware's).
    assert!(crate::passes::simplify::fold_binary(
        BinOp::FDiv,
        &Operand::F64(0.0),
        &Operand::F64(0.0)
    )
    .is_none());
}

#[test]
fn what_only_one_branch_reads_is_computed_in_that_branch() {
    // b = box x; y = x * 2; c = x < 1; if c { return b } else { return y... boxed }
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let boxed = b.let1(Ty::Boxed, "b", Op::Rt(Rt::BoxReal, vec![Operand::Var(x)]));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(2.0)),
    );
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FLt, Operand::Var(x), Operand::F64(1.0)),
    );
    b.open();
    let other = b.let1(Ty::Boxed, "o", Op::Rt(Rt::BoxReal, vec![Operand::Var(y)]));
    b.push(Stmt::Return(vec![Operand::Var(other)]));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Return(vec![Operand::Var(boxed)])],
        els,
    });
    let mut p = program(vec![b.finish(spec(0), vec![x], layout(&[Ty::Boxed]))]);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle)).expect(needle);
    // The box moved into the branch that returns it, the product into the other.
    assert!(at("if c") < at("vl_real(x"), "{text}");
    assert!(at("} else {") < at("fmul x, 2.0"), "{text}");
}

/// `f0(a: array(array(f64))) -> f64`: an unused matrix built from `a` (a `build` whose
/// elements are `build`s: the dense sensitivity of an array of arrays that a gradient drops),
/// an unused new array, and a use of `a`'s length that stays.
#[test]
fn unused_builds_of_builds_and_new_arrays_are_dead_code() {
    let row_ty = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(Ty::Array(layout(std::slice::from_ref(&row_ty))), "a".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let m = b.var(Ty::Array(layout(std::slice::from_ref(&row_ty))), "m");
    let i = b.var(Ty::I64, "i");
    b.open();
    let row = load(&mut b, row_ty.clone(), "row", a, Operand::Var(i));
    let k = b.let1(Ty::I64, "k", Op::Length(Operand::Var(row)));
    let inner = b.var(row_ty.clone(), "r");
    let j = b.var(Ty::I64, "j");
    b.open();
    let x = load(&mut b, Ty::F64, "x", row, Operand::Var(j));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(2.0)),
    );
    let body = b.close();
    b.push(Stmt::Build {
        array: inner,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(k),
        index: j,
        body,
        elem: vec![Operand::Var(y)],
    });
    let body = b.close();
    b.push(Stmt::Build {
        array: m,
        layout: layout(std::slice::from_ref(&row_ty)),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(inner)],
    });
    b.let1(
        row_ty.clone(),
        "z",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::Var(n),
        },
    );
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(n)));
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    let mut p = program(vec![b.finish(spec(0), vec![a], layout(&[Ty::F64]))]);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(
        !text.contains("build") && !text.contains("new array"),
        "{text}"
    );
    assert!(text.contains("length a"), "{text}");
}

#[test]
fn a_function_whose_only_call_was_inlined_is_left_a_stub() {
    let mut p = fold_of_gets();
    p.main = Some(FuncId(0));
    passes::inline::run(&mut p);
    passes::dead::run(&mut p);
    verify(&p).unwrap();
    let step = crate::print::function(&p, FuncId(1));
    assert_eq!(step.lines().count(), 3, "{step}");
    assert!(step.contains("return 0.0"), "{step}");
    // The entry keeps its body.
    assert!(crate::print::function(&p, FuncId(0)).contains("load a0"));
}

/// Forward `grad` of a dot product as the lowering gives it once inlined:
/// `build n (i -> tangent (ifold ((s0, s1), j -> (s0 + x_j v_j, s1 + (x_j 0 + h_j v_j))) (z, 0) n))`
/// where `h = build n (j -> if i = j then 1 else 0)` is the one-hot tangent of `x` (`init`:
/// the tangent accumulator's initial value).
fn forward_grad_dot(init: f64) -> Function {
    forward_grad_dot_of(init, false, None)
}

/// `forward_grad_dot`, with `v_j` replaced by `exp(v_j)` if `exp`, and with the tangent's term
/// divided by `divisor` if given (`Some(None)`: by `x_j x_j`, as in the tangent of a quotient;
/// `Some(Some(c))`: by the constant `c`).
fn forward_grad_dot_of(init: f64, exp: bool, divisor: Option<Option<f64>>) -> Function {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let x = b.named_var(arr.clone(), "x".into());
    let v = b.named_var(arr.clone(), "v".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let g = b.var(arr.clone(), "g");
    let i = b.var(Ty::I64, "i");
    b.open();
    // The one-hot array.
    let h = b.var(arr, "h");
    let j = b.var(Ty::I64, "j");
    b.open();
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::IEq, Operand::Var(i), Operand::Var(j)),
    );
    let t = b.var(Ty::F64, "t");
    b.push(Stmt::Declare(vec![t]));
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Set(t, Operand::F64(1.0))],
        els: vec![Stmt::Set(t, Operand::F64(0.0))],
    });
    let hot = b.close();
    b.push(Stmt::Build {
        array: h,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: j,
        body: hot,
        elem: vec![Operand::Var(t)],
    });
    // The dual dot product.
    let (s0, s1) = (b.var(Ty::F64, "s"), b.var(Ty::F64, "s"));
    let k = b.var(Ty::I64, "k");
    b.open();
    let at_k = |b: &mut Builder, a: Var| load(b, Ty::F64, "a", a, Operand::Var(k));
    let (xk, hk, vk) = (at_k(&mut b, x), at_k(&mut b, h), at_k(&mut b, v));
    let vk = if exp {
        b.let1(Ty::F64, "e", Op::Unary(UnOp::Exp, Operand::Var(vk)))
    } else {
        vk
    };
    let bin = |b: &mut Builder, op, p: Var, q: Operand| {
        b.let1(Ty::F64, "p", Op::Binary(op, Operand::Var(p), q))
    };
    let p = bin(&mut b, BinOp::FMul, xk, Operand::Var(vk));
    let n0 = bin(&mut b, BinOp::FAdd, s0, Operand::Var(p));
    let q0 = bin(&mut b, BinOp::FMul, xk, Operand::F64(0.0));
    let q1 = bin(&mut b, BinOp::FMul, hk, Operand::Var(vk));
    let q = bin(&mut b, BinOp::FAdd, q0, Operand::Var(q1));
    let q = match divisor {
        None => q,
        Some(None) => {
            let d = bin(&mut b, BinOp::FMul, xk, Operand::Var(xk));
            bin(&mut b, BinOp::FDiv, q, Operand::Var(d))
        }
        Some(Some(c)) => bin(&mut b, BinOp::FDiv, q, Operand::F64(c)),
    };
    let n1 = bin(&mut b, BinOp::FAdd, s1, Operand::Var(q));
    let step = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s0, s1],
        init: vec![Operand::F64(0.0), Operand::F64(init)],
        count: Operand::Var(n),
        index: k,
        body: step,
        next: vec![Operand::Var(n0), Operand::Var(n1)],
    });
    let body = b.close();
    b.push(Stmt::Build {
        array: g,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(s1)],
    });
    b.push(Stmt::Return(vec![Operand::Var(g)]));
    let arr = Ty::Array(layout(&[Ty::F64]));
    b.finish(spec(0), vec![x, v], std::iter::once(arr).collect())
}

#[test]
fn a_build_read_only_by_gets_is_fused_and_an_unread_accumulator_dropped() {
    let mut f = forward_grad_dot(0.0);
    verify(&program(vec![f.clone()])).unwrap();
    assert!(passes::fuse::function(&mut f));
    passes::simplify::function(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The one-hot array is not made: its step is computed where it is read.
    assert_eq!(text.matches("= build").count(), 1, "{text}");
    assert!(text.contains("= ieq i"), "{text}");
    // The primal half of the dual number is not computed: one accumulator, no x_j v_j.
    assert!(text.contains("= ifold from (0.0) count"), "{text}");
    assert_eq!(text.matches("fmul").count(), 2, "{text}");
}

#[test]
fn a_fold_that_adds_zeros_but_at_one_index_runs_that_step_behind_a_guard() {
    let mut f = forward_grad_dot(0.0);
    passes::scalar_optimise(&mut f);
    let mut p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The guard (x and v finite, tested as `a * 0 = 0`) is a loop of its own, before the
    // loop over i (it reads nothing that loop defines).
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at(": bool = ifold from (#t)") < at("= build"), "{text}");
    assert_eq!(text.matches("feq").count(), 2, "{text}");
    // Where it holds, the entry is the step at i; where not, the loop over every j.
    assert!(text.contains("if ok"), "{text}");
    assert_eq!(text.matches("= ifold").count(), 1, "{text}");
    assert!(text.contains("for "), "{text}");
    passes::loops::run(&mut p);
    verify(&p).unwrap();

    // A fold whose tangent starts at -0 is left alone: -0 + 0 is +0, not -0.
    let mut f = forward_grad_dot(-0.0);
    passes::scalar_optimise(&mut f);
    let text = crate::print::function(&program(vec![f]), FuncId(0));
    assert!(!text.contains("from (#t)"), "{text}");
    assert!(text.contains("ieq"), "{text}");
}

/// `f` after the scalar optimisation, verified, printed, and where the guard (before the loop
/// over i) ends in the text.
fn optimised_with_guard(mut f: Function) -> (String, usize) {
    passes::scalar_optimise(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let guard_end = text.find("= build").expect("the loop over i");
    (text, guard_end)
}

/// Where a value the guard needs finite is an `exp` (log-sum-exp's terms), the guard tests its
/// argument, finite and below 709.78, instead of computing the `exp` at every index again.
#[test]
fn a_guard_tests_the_argument_of_an_exp() {
    let (text, guard_end) = optimised_with_guard(forward_grad_dot_of(0.0, true, None));
    let guard = &text[text.find(": bool = ifold from (#t)").expect("the guard")..guard_end];
    assert!(!guard.contains("exp"), "{text}");
    assert!(guard.contains("fle") && guard.contains("709.78"), "{text}");
    // The step at i still computes the exp.
    assert!(text[guard_end..].contains("exp"), "{text}");
}

/// A zero divided by a value is a zero unless the value is a zero or NaN: the guard tests the
/// divisor (`x_j x_j`, which can underflow to a zero) above or below zero, and a fold whose
/// terms are divided by the constant zero is left alone (`0 / 0` is NaN).
#[test]
fn a_guard_tests_a_divisor_neither_zero_nor_nan() {
    let (text, guard_end) = optimised_with_guard(forward_grad_dot_of(0.0, false, Some(None)));
    let guard = &text[text.find(": bool = ifold from (#t)").expect("the guard")..guard_end];
    assert!(
        guard.contains("fgt") && guard.contains("flt") && guard.contains(" or "),
        "{text}"
    );
    assert!(text.contains("if ok"), "{text}");
    // A constant divisor other than zero needs no test.
    let mut f = forward_grad_dot_of(0.0, false, Some(Some(2.0)));
    passes::scalar_optimise(&mut f);
    let text = crate::print::function(&program(vec![f]), FuncId(0));
    assert!(
        text.contains("from (#t)") && !text.contains("fgt"),
        "{text}"
    );
    let mut f = forward_grad_dot_of(0.0, false, Some(Some(0.0)));
    passes::scalar_optimise(&mut f);
    let text = crate::print::function(&program(vec![f]), FuncId(0));
    assert!(!text.contains("from (#t)"), "{text}");
}

#[test]
fn a_fold_that_adds_what_is_not_zero_at_other_indices_is_left_alone() {
    let mut f = forward_grad_dot(0.0);
    // s1 + (x_j 0 + h_j v_j) becomes s1 + (x_j + h_j v_j): x_j is no zero.
    walk_mut(&mut f.body, &mut |s| {
        if let Stmt::Let(_, Op::Binary(BinOp::FMul, x, Operand::F64(z))) = s {
            if *z == 0.0 {
                let x = x.clone();
                *s = Stmt::Let(stmt_defs(s), Op::Copy(x));
            }
        }
    });
    passes::scalar_optimise(&mut f);
    let text = crate::print::function(&program(vec![f]), FuncId(0));
    assert!(!text.contains("from (#t)"), "{text}");
    assert_eq!(text.matches("= ifold").count(), 1, "{text}");
}

#[test]
fn a_check_that_two_lengths_are_equal_proves_reads_of_the_one_by_a_loop_over_the_other() {
    // if (length u = length w) {} else {fail}; ifold over length u reading w[j], checked
    // against length w: proved after the check, not before nor outside its block.
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let u = b.named_var(arr.clone(), "u".into());
    let w = b.named_var(arr, "w".into());
    let nu = b.let1(Ty::I64, "nu", Op::Length(Operand::Var(u)));
    let nw = b.let1(Ty::I64, "nw", Op::Length(Operand::Var(w)));
    let same = b.let1(
        Ty::Bool,
        "same",
        Op::Binary(BinOp::IEq, Operand::Var(nu), Operand::Var(nw)),
    );
    let fold = |b: &mut Builder, site: i64| {
        let s = b.var(Ty::F64, "s");
        let j = b.var(Ty::I64, "j");
        b.open();
        let k = b.let1(
            Ty::I64,
            "k",
            Op::Rt(
                Rt::IndexI64,
                vec![Operand::I64(site), Operand::Var(j), Operand::Var(nw)],
            ),
        );
        let a = load(b, Ty::F64, "a", w, Operand::Var(k));
        let t = b.let1(
            Ty::F64,
            "t",
            Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(a)),
        );
        let body = b.close();
        b.push(Stmt::Ifold {
            accs: vec![s],
            init: vec![Operand::F64(0.0)],
            count: Operand::Var(nu),
            index: j,
            body,
            next: vec![Operand::Var(t)],
        });
        s
    };
    let before = fold(&mut b, 1);
    // if (a0 > 0) { check; fold } then a fold after the branch: the check holds in the branch.
    let a = b.named_var(Ty::F64, "a0".into());
    let positive = b.let1(
        Ty::Bool,
        "pos",
        Op::Binary(BinOp::FGt, Operand::Var(a), Operand::F64(0.0)),
    );
    b.open();
    push_length_check(&mut b, same, "bundle", Operand::Var(nu), Operand::Var(nw));
    let inside = fold(&mut b, 2);
    let then = b.close();
    let result = b.var(Ty::F64, "res");
    let mut then = then;
    then.push(Stmt::Set(result, Operand::Var(inside)));
    b.push(Stmt::Declare(vec![result]));
    b.push(Stmt::If {
        cond: Operand::Var(positive),
        then,
        els: vec![Stmt::Set(result, Operand::F64(0.0))],
    });
    let after = fold(&mut b, 3);
    let r = b.let1(
        Ty::F64,
        "r",
        Op::Binary(BinOp::FAdd, Operand::Var(before), Operand::Var(after)),
    );
    let r2 = b.let1(
        Ty::F64,
        "r",
        Op::Binary(BinOp::FAdd, Operand::Var(r), Operand::Var(result)),
    );
    b.push(Stmt::Return(vec![Operand::Var(r2)]));
    let mut f = b.finish(spec(0), vec![u, w, a], layout(&[Ty::F64]));
    passes::simplify::function(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("vl_index_i(1i"), "{text}");
    assert!(!text.contains("vl_index_i(2i"), "{text}");
    assert!(text.contains("vl_index_i(3i"), "{text}");
}

#[test]
fn a_variable_assigned_once_where_it_is_declared_becomes_a_definition() {
    let mut b = Builder::new();
    let a = b.named_var(Ty::F64, "a0".into());
    let t = b.var(Ty::F64, "t");
    b.push(Stmt::Declare(vec![t]));
    b.push(Stmt::If {
        cond: Operand::Bool(true),
        then: vec![Stmt::Set(t, Operand::F64(1.0))],
        els: vec![Stmt::Set(t, Operand::F64(0.0))],
    });
    let p = b.let1(
        Ty::F64,
        "p",
        Op::Binary(BinOp::FMul, Operand::Var(a), Operand::Var(t)),
    );
    b.push(Stmt::Return(vec![Operand::Var(p)]));
    let mut f = b.finish(spec(0), vec![a], layout(&[Ty::F64]));
    // Twice: the branch on a constant is spliced, then its assignment is a definition, and
    // `a0 * 1` is `a0`.
    passes::simplify::function(&mut f);
    passes::simplify::function(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("var "), "{text}");
    assert!(text.contains("return a0"), "{text}");
}

/// `ifold ((m, d), j -> if x_j > m then (x_j, [i = j]) else (m, d)) (x_0, 0) n` inside
/// `build n (i -> ...)`, then `(s, t) = ifold ((s, t), j -> (s + x_j, t + (x_j - m) d)) (0, 0) n`;
/// the element is `d + s + t`: the running maximum of x with the one-hot tangent of forward
/// `grad`, and two sums that do not read each other.
fn running_maximum() -> Function {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let x = b.named_var(arr.clone(), "x".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let g = b.var(arr, "g");
    let i = b.var(Ty::I64, "i");
    b.open();
    let x0 = load(&mut b, Ty::F64, "x0", x, Operand::I64(0));
    let (m, d) = (b.var(Ty::F64, "m"), b.var(Ty::F64, "d"));
    let j = b.var(Ty::I64, "j");
    b.open();
    let (m2, d2) = (b.var(Ty::F64, "m"), b.var(Ty::F64, "d"));
    b.push(Stmt::Declare(vec![m2, d2]));
    let xj = load(&mut b, Ty::F64, "xj", x, Operand::Var(j));
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FGt, Operand::Var(xj), Operand::Var(m)),
    );
    b.open();
    let hot = b.let1(
        Ty::Bool,
        "hot",
        Op::Binary(BinOp::IEq, Operand::Var(i), Operand::Var(j)),
    );
    let h = b.var(Ty::F64, "h");
    b.push(Stmt::Declare(vec![h]));
    b.push(Stmt::If {
        cond: Operand::Var(hot),
        then: vec![Stmt::Set(h, Operand::F64(1.0))],
        els: vec![Stmt::Set(h, Operand::F64(0.0))],
    });
    b.push(Stmt::Set(m2, Operand::Var(xj)));
    b.push(Stmt::Set(d2, Operand::Var(h)));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els: vec![
            Stmt::Set(m2, Operand::Var(m)),
            Stmt::Set(d2, Operand::Var(d)),
        ],
    });
    let step = b.close();
    b.push(Stmt::Ifold {
        accs: vec![m, d],
        init: vec![Operand::Var(x0), Operand::F64(0.0)],
        count: Operand::Var(n),
        index: j,
        body: step,
        next: vec![Operand::Var(m2), Operand::Var(d2)],
    });
    let (s, t) = (b.var(Ty::F64, "s"), b.var(Ty::F64, "t"));
    let k = b.var(Ty::I64, "k");
    b.open();
    let xk = load(&mut b, Ty::F64, "xk", x, Operand::Var(k));
    let s2 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(xk)),
    );
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FSub, Operand::Var(xk), Operand::Var(m)),
    );
    let yd = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FMul, Operand::Var(y), Operand::Var(d)),
    );
    let t2 = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(t), Operand::Var(yd)),
    );
    let sums = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s, t],
        init: vec![Operand::F64(0.0), Operand::F64(0.0)],
        count: Operand::Var(n),
        index: k,
        body: sums,
        next: vec![Operand::Var(s2), Operand::Var(t2)],
    });
    let e1 = b.let1(
        Ty::F64,
        "e",
        Op::Binary(BinOp::FAdd, Operand::Var(d), Operand::Var(s)),
    );
    let e2 = b.let1(
        Ty::F64,
        "e",
        Op::Binary(BinOp::FAdd, Operand::Var(e1), Operand::Var(t)),
    );
    let body = b.close();
    b.push(Stmt::Build {
        array: g,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(e2)],
    });
    b.push(Stmt::Return(vec![Operand::Var(g)]));
    let arr = Ty::Array(layout(&[Ty::F64]));
    b.finish(spec(0), vec![x], std::iter::once(arr).collect())
}

#[test]
fn fission_splits_sums_that_do_not_read_each_other_and_a_last_write_becomes_an_index() {
    let mut f = running_maximum();
    verify(&program(vec![f.clone()])).unwrap();
    assert!(passes::fission::function(&mut f));
    passes::simplify::function(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // Three loops in the build: the maximum with the index of its last change, and one loop
    // per sum.
    assert_eq!(text.matches("= ifold").count(), 3, "{text}");
    assert!(text.contains(": i64 = ifold from (x0"), "{text}");
    assert!(text.contains("-1i) count"), "{text}");
    // The tangent d: the one-hot at that index, computed once after the loop.
    assert!(text.contains("= ilt last"), "{text}");
    assert_eq!(text.matches("ieq i").count(), 1, "{text}");
}

#[test]
fn what_the_loop_does_not_change_leaves_it_reads_of_arrays_only_where_it_runs() {
    let mut f = running_maximum();
    passes::fission::function(&mut f);
    passes::simplify::function(&mut f);
    passes::simplify::function(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // x_0, the maximum and the sum of x leave the build: under `if 0 < n` (x_0 may not exist
    // otherwise); the sum that reads d stays.
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(text.contains("= ilt 0i, n"), "{text}");
    assert!(at("= load x[0i]") < at("= build"), "{text}");
    assert!(at("ifold from (x0") < at("= build"), "{text}");
    assert_eq!(
        text[at("= build")..].matches("= ifold").count(),
        1,
        "{text}"
    );
}

#[test]
fn inlining_copies_only_the_variables_the_callee_uses() {
    // The step's table holds 1000 variables its code no longer uses (what its own
    // optimisation removed): the caller gets none of them.
    let mut p = fold_of_gets();
    for k in 0..1000 {
        fresh_var(&mut p.funcs[1].vars, Ty::F64, &format!("dead{k}_"));
    }
    let before = p.funcs[0].vars.len();
    passes::inline::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("call f1"), "{text}");
    let added = p.funcs[0].vars.len() - before;
    assert!(added < 50, "{added} variables added");
}

#[test]
fn reads_of_an_array_written_in_place_are_neither_hoisted_nor_fused() {
    // s = ifold (s, i -> (a[i] := a[0] + 1; s + a[0])) 0 (length a), then b = build n (j ->
    // 2 a[j]); a[0] := 5; return s + b[0]: an iteration writes what the next reads, and b
    // holds what a held before the write.
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let s = b.var(Ty::F64, "s");
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = load(&mut b, Ty::F64, "x", a, Operand::I64(0));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FAdd, Operand::Var(x), Operand::F64(1.0)),
    );
    b.push(Stmt::Store {
        array: Operand::Var(a),
        index: Operand::Var(i),
        slot: 0,
        value: Operand::Var(y),
    });
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(x)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(t)],
    });
    let doubled = b.var(arr, "b");
    let j = b.var(Ty::I64, "j");
    b.open();
    let aj = load(&mut b, Ty::F64, "aj", a, Operand::Var(j));
    let d = b.let1(
        Ty::F64,
        "d",
        Op::Binary(BinOp::FMul, Operand::Var(aj), Operand::F64(2.0)),
    );
    let step = b.close();
    b.push(Stmt::Build {
        array: doubled,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: j,
        body: step,
        elem: vec![Operand::Var(d)],
    });
    b.push(Stmt::Store {
        array: Operand::Var(a),
        index: Operand::I64(0),
        slot: 0,
        value: Operand::F64(5.0),
    });
    let b0 = load(&mut b, Ty::F64, "b0", doubled, Operand::I64(0));
    let r = b.let1(
        Ty::F64,
        "r",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(b0)),
    );
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    let mut f = b.finish(spec(0), vec![a], layout(&[Ty::F64]));
    passes::scalar_optimise(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("= ifold") < at("= load a[0i]"), "{text}");
    assert!(text.contains("= build"), "{text}");
}

/// `f0(x, p, q)`: `n = length x`, checked equal to 3; `b = build n (x[i] + 1)`; a variable `j`
/// set to a new array of two elements in each branch of `if p > q`; returns `j[1] + b[2]`,
/// reading `j` at an index checked against its length.
fn small_arrays_behind_a_check_and_a_join() -> Function {
    let mut b = Builder::new();
    let f = Ty::Array(layout(&[Ty::F64]));
    let x = b.named_var(f.clone(), "x".into());
    let p = b.named_var(Ty::F64, "p".into());
    let q = b.named_var(Ty::F64, "q".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let ok = b.let1(
        Ty::Bool,
        "ok",
        Op::Binary(BinOp::IEq, Operand::Var(n), Operand::I64(3)),
    );
    push_length_check(&mut b, ok, "plus", Operand::Var(n), Operand::I64(3));
    let i = b.var(Ty::I64, "i");
    b.open();
    let e = load(&mut b, Ty::F64, "e", x, Operand::Var(i));
    let e1 = b.let1(
        Ty::F64,
        "e",
        Op::Binary(BinOp::FAdd, Operand::Var(e), Operand::F64(1.0)),
    );
    let body = b.close();
    let built = b.var(f.clone(), "b");
    b.push(Stmt::Build {
        array: built,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(e1)],
    });
    let j = b.var(f.clone(), "j");
    b.push(Stmt::Declare(vec![j]));
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FGt, Operand::Var(p), Operand::Var(q)),
    );
    let branch = |b: &mut Builder, first: Var, second: Var| {
        b.open();
        let a = b.let1(
            f.clone(),
            "a",
            Op::NewArray {
                layout: layout(&[Ty::F64]),
                count: Operand::I64(2),
            },
        );
        for (k, v) in [first, second].into_iter().enumerate() {
            b.push(Stmt::Store {
                array: Operand::Var(a),
                index: Operand::I64(k as i64),
                slot: 0,
                value: Operand::Var(v),
            });
        }
        b.push(Stmt::Set(j, Operand::Var(a)));
        b.close()
    };
    let then = branch(&mut b, p, q);
    let els = branch(&mut b, q, p);
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els,
    });
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(j)));
    let k = b.let1(
        Ty::I64,
        "k",
        Op::Rt(
            Rt::IndexI64,
            vec![Operand::I64(-1), Operand::I64(1), Operand::Var(m)],
        ),
    );
    let y = load(&mut b, Ty::F64, "y", j, Operand::Var(k));
    let z = load(&mut b, Ty::F64, "z", built, Operand::I64(2));
    let r = b.let1(
        Ty::F64,
        "r",
        Op::Binary(BinOp::FAdd, Operand::Var(y), Operand::Var(z)),
    );
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    b.finish(spec(0), vec![x, p, q], layout(&[Ty::F64]))
}

#[test]
fn small_arrays_behind_a_length_check_and_joined_by_a_variable_become_scalars() {
    let mut p = program(vec![small_arrays_behind_a_check_and_a_join()]);
    verify(&p).unwrap();
    passes::scalar_optimise(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The check stays; the build of `n` elements is three loads of `x` (its count is 3 once
    // the check holds), the join is a variable per element, and no array is made.
    assert!(text.contains("vl_length_fail"), "{text}");
    assert!(
        !text.contains("new array") && !text.contains("build") && !text.contains("length j"),
        "{text}"
    );
    assert!(text.contains("load x[2i].0"), "{text}");
    assert!(!text.contains("vl_index_i"), "{text}");
}

/// `f1(x: f64) -> (array, array)`: a forward array of three elements, `(x k, k)` for `k < 3`,
/// made as `vlad-lower` makes one, two new arrays filled by a `for` loop side by side, after
/// `extra` statements of arithmetic (to weigh the callee); with `third`, a third array of
/// `k + 1` filled beside them and returned too.
fn forward_triple(extra: usize, third: bool) -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let x = b.named_var(Ty::F64, "x".into());
    let mut y = x;
    for _ in 0..extra {
        y = b.let1(
            Ty::F64,
            "w",
            Op::Binary(BinOp::FMul, Operand::Var(y), Operand::F64(1.5)),
        );
    }
    let new = |b: &mut Builder, name: &str| {
        b.let1(
            arr.clone(),
            name,
            Op::NewArray {
                layout: layout(&[Ty::F64]),
                count: Operand::I64(3),
            },
        )
    };
    let mut made = vec![new(&mut b, "p"), new(&mut b, "t")];
    if third {
        made.push(new(&mut b, "u"));
    }
    let i = b.var(Ty::I64, "i");
    b.open();
    let k = b.let1(Ty::F64, "k", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let xk = b.let1(
        Ty::F64,
        "xk",
        Op::Binary(BinOp::FMul, Operand::Var(y), Operand::Var(k)),
    );
    let k1 = b.let1(
        Ty::F64,
        "k",
        Op::Binary(BinOp::FAdd, Operand::Var(k), Operand::F64(1.0)),
    );
    for (a, v) in made.iter().zip([xk, k, k1]) {
        b.push(Stmt::Store {
            array: Operand::Var(*a),
            index: Operand::Var(i),
            slot: 0,
            value: Operand::Var(v),
        });
    }
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::I64(3),
        body,
    });
    b.push(Stmt::Return(
        made.iter().map(|a| Operand::Var(*a)).collect(),
    ));
    let results: Vec<Ty> = made.iter().map(|_| arr.clone()).collect();
    b.finish(spec(1), vec![x], layout(&results))
}

/// `f0(a, b) -> f64`: calls `f1` on `a` and on `b` and returns the sum of element 2 of the
/// first's primal array and element 1 of the second's tangent array.
fn two_calls_of_forward_triple() -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let (a, c) = (
        b.named_var(Ty::F64, "a".into()),
        b.named_var(Ty::F64, "b".into()),
    );
    let read = |b: &mut Builder, x: Var, which: usize, k: i64| {
        let (p, t) = (b.var(arr.clone(), "p"), b.var(arr.clone(), "t"));
        b.push(Stmt::Let(
            vec![p, t],
            Op::Call {
                func: FuncId(1),
                args: vec![Operand::Var(x)],
                guard: None,
            },
        ));
        load(b, Ty::F64, "e", [p, t][which], Operand::I64(k))
    };
    let first = read(&mut b, a, 0, 2);
    let second = read(&mut b, c, 1, 1);
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(first), Operand::Var(second)),
    );
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    b.finish(spec(0), vec![a, c], layout(&[Ty::F64]))
}

#[test]
fn a_loop_filling_small_arrays_side_by_side_is_unrolled_and_the_arrays_become_scalars() {
    // Three arrays filled side by side (two rounds of `scalar_optimise` would replace two
    // arrays filled one at a time).
    let mut p = program(vec![forward_triple(0, true)]);
    let f = p.func_mut(FuncId(0));
    f.kind = spec(0);
    // Read element 2 of each array before returning them, as a caller would once inlined.
    let ret = f.body.pop().expect("a return");
    let Stmt::Return(xs) = ret else {
        panic!("not a return")
    };
    let mut reads = Vec::new();
    for x in &xs {
        let e = f.new_var(Ty::F64, "e");
        f.body.push(Stmt::Let(
            vec![e],
            Op::Load {
                array: x.clone(),
                index: Operand::I64(2),
                slot: 0,
            },
        ));
        reads.push(e);
    }
    let s = f.new_var(Ty::F64, "s");
    f.body.push(Stmt::Let(
        vec![s],
        Op::Binary(BinOp::FAdd, Operand::Var(reads[0]), Operand::Var(reads[1])),
    ));
    let s = {
        let t = f.new_var(Ty::F64, "s");
        f.body.push(Stmt::Let(
            vec![t],
            Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(reads[2])),
        ));
        t
    };
    f.body.push(Stmt::Return(vec![Operand::Var(s)]));
    f.results = layout(&[Ty::F64]);
    verify(&p).unwrap();
    passes::scalar_optimise(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(
        !text.contains("for ") && !text.contains("new array") && !text.contains("load"),
        "{text}"
    );
    assert!(text.contains("fmul x, 2.0"), "{text}");
}

#[test]
fn a_callee_that_returns_small_arrays_is_inlined_at_each_call_and_its_arrays_replaced() {
    // Larger than `MAX_SIZE` (the limit of a callee called twice), within the limit of one
    // that returns only small arrays it made.
    let extra = passes::inline::MAX_SIZE + 10;
    let mut p = program(vec![
        two_calls_of_forward_triple(),
        forward_triple(extra, false),
    ]);
    verify(&p).unwrap();
    passes::inline::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("call f1"), "{text}");
    assert!(
        !text.contains("new array") && !text.contains("load"),
        "{text}"
    );
    // A callee that returns an array of a count not known stays a call.
    let mut p = program(vec![
        two_calls_of_forward_triple(),
        forward_triple(extra, false),
    ]);
    let callee = p.func_mut(FuncId(1));
    let x = callee.params[0];
    let n = callee.new_var(Ty::I64, "n");
    callee.body.insert(
        0,
        Stmt::Let(vec![n], Op::Unary(UnOp::F64ToI64, Operand::Var(x))),
    );
    walk_mut(&mut callee.body, &mut |s| {
        if let Stmt::Let(_, Op::NewArray { count, .. }) = s {
            *count = Operand::Var(n);
        }
    });
    verify(&p).unwrap();
    passes::inline::run(&mut p);
    assert!(crate::print::function(&p, FuncId(0)).contains("call f1"));
}

/// `f0(a, p, n)`: `build n (i) { site 5; m = length a; if 0 < m {} else {fail};
/// k = check 2 < m; x = a[k]; c = p > 0;
/// if c { s = sqrt p; e = s * i } else { e = i }; elem x * e }`: what a pass of forward
/// `jacob` does at each direction, reading its input at constant indices and branching on a
/// value of the primal.
fn loop_reading_a_constant_index_and_branching_on_an_invariant() -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let a = b.named_var(arr.clone(), "a".into());
    let p = b.named_var(Ty::F64, "p".into());
    let n = b.named_var(Ty::I64, "n".into());
    let i = b.var(Ty::I64, "i");
    b.open();
    b.push(Stmt::Site(5));
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(a)));
    let some = b.let1(
        Ty::Bool,
        "some",
        Op::Binary(BinOp::ILt, Operand::I64(0), Operand::Var(m)),
    );
    push_length_check(&mut b, some, "plus", Operand::Var(m), Operand::I64(1));
    let k = b.let1(
        Ty::I64,
        "k",
        Op::Rt(
            Rt::IndexI64,
            vec![Operand::I64(-1), Operand::I64(2), Operand::Var(m)],
        ),
    );
    let x = load(&mut b, Ty::F64, "x", a, Operand::Var(k));
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FGt, Operand::Var(p), Operand::F64(0.0)),
    );
    let e = b.var(Ty::F64, "e");
    b.push(Stmt::Declare(vec![e]));
    b.open();
    let s = b.let1(Ty::F64, "s", Op::Unary(UnOp::Sqrt, Operand::Var(p)));
    let se = b.let1(
        Ty::F64,
        "se",
        Op::Binary(BinOp::FMul, Operand::Var(s), Operand::Var(r)),
    );
    b.push(Stmt::Set(e, Operand::Var(se)));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els: vec![Stmt::Set(e, Operand::Var(r))],
    });
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FMul, Operand::Var(x), Operand::Var(e)),
    );
    let body = b.close();
    let out = b.var(arr, "out");
    b.push(Stmt::Build {
        array: out,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(y)],
    });
    b.push(Stmt::Return(vec![Operand::Var(out)]));
    let f = b.finish(
        spec(0),
        vec![a, p, n],
        layout(&[Ty::Array(layout(&[Ty::F64]))]),
    );
    let _ = x;
    f
}

#[test]
fn an_invariant_check_and_the_invariant_arithmetic_of_a_branch_leave_the_loop() {
    let mut p = program(vec![
        loop_reading_a_constant_index_and_branching_on_an_invariant(),
    ]);
    let site = Site {
        prefix: "t.vlad:1:1: error: ".into(),
        excerpt: None,
    };
    p.sites = vec![site; 6];
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    // The check (with the site it had in the loop), the read it guards and the square root
    // run once, before the loop, the check and the read only if the loop runs.
    assert!(at("rt vl_index_i(5i, 2i") < at("= build"), "{text}");
    assert!(at("= ilt 0i, n") < at("rt vl_index_i"), "{text}");
    assert!(at("load a[") < at("= build"), "{text}");
    assert!(at("= sqrt p") < at("= build"), "{text}");
    // The check written as an `if` reports at the site the body set: its failing branch sets
    // it.
    assert!(text.contains("site 5\n      rt vl_length_fail"), "{text}");
    assert!(at("vl_length_fail") < at("= build"), "{text}");
    // What reads the index stays.
    assert!(at("= build") < at("fmul"), "{text}");
}

#[test]
fn an_array_joined_before_it_is_filled_is_left_an_array() {
    // a = new array 1; j := a; x = p * 2; a[0] = x; return j[0]: the join reads `a` before
    // its element is stored, so `j`'s element cannot be the value stored (it is defined
    // after the assignment).
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let p = b.named_var(Ty::F64, "p".into());
    let j = b.var(arr.clone(), "j");
    b.push(Stmt::Declare(vec![j]));
    let a = b.let1(
        arr,
        "a",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::I64(1),
        },
    );
    b.push(Stmt::Set(j, Operand::Var(a)));
    let x = b.let1(
        Ty::F64,
        "x",
        Op::Binary(BinOp::FMul, Operand::Var(p), Operand::F64(2.0)),
    );
    b.push(Stmt::Store {
        array: Operand::Var(a),
        index: Operand::I64(0),
        slot: 0,
        value: Operand::Var(x),
    });
    let y = load(&mut b, Ty::F64, "y", j, Operand::I64(0));
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let mut p = program(vec![b.finish(spec(0), vec![p], layout(&[Ty::F64]))]);
    verify(&p).unwrap();
    passes::scalars::replace(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("new array"), "{text}");
}

#[test]
fn a_variable_assigned_twice_in_a_branch_is_not_taken_for_a_join() {
    // var s; if p > 0 { s := 1 } else { s := 0; t = s + 1; s := t; u = s + 1; s := u };
    // return s (an unrolled loop's accumulator in the branch a one-hot guard fails to): `s`
    // changes between the two sums, which are two values.
    let mut b = Builder::new();
    let p = b.named_var(Ty::F64, "p".into());
    let s = b.var(Ty::F64, "s");
    b.push(Stmt::Declare(vec![s]));
    let c = b.let1(
        Ty::Bool,
        "c",
        Op::Binary(BinOp::FGt, Operand::Var(p), Operand::F64(0.0)),
    );
    b.open();
    b.push(Stmt::Set(s, Operand::F64(0.0)));
    for name in ["t", "u"] {
        let t = b.let1(
            Ty::F64,
            name,
            Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::F64(1.0)),
        );
        b.push(Stmt::Set(s, Operand::Var(t)));
    }
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Set(s, Operand::F64(1.0))],
        els,
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let mut p = program(vec![b.finish(spec(0), vec![p], layout(&[Ty::F64]))]);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert_eq!(text.matches("fadd").count(), 2, "{text}");
}

/// `exp(x_i - m)` in a loop over `n` indexed by `i`, as the loop's body computes it: the
/// variable holding it.
fn exp_of_entry_minus(b: &mut Builder, x: Var, i: Var, m: Var) -> Var {
    let xi = load(b, Ty::F64, "xi", x, Operand::Var(i));
    let d = b.let1(
        Ty::F64,
        "d",
        Op::Binary(BinOp::FSub, Operand::Var(xi), Operand::Var(m)),
    );
    b.let1(Ty::F64, "e", Op::Unary(UnOp::Exp, Operand::Var(d)))
}

/// Log-sum-exp's gradient as `grad` leaves it: `if <cond> { s = sum_i exp(x_i - m); mm := m;
/// ss := s } else { mm := 0; ss := 0 }`, then `build n (j -> exp(x_j - <later>) / ss)`, where
/// `cond` is `ilt <first>, n` and `later` is `mm` or the parameter `p`.
fn sum_of_exps_then_their_quotients(first: i64, later_is_join: bool) -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let x = b.named_var(arr.clone(), "x".into());
    let m = b.named_var(Ty::F64, "m".into());
    let p = b.named_var(Ty::F64, "p".into());
    let n = b.named_var(Ty::I64, "n".into());
    let mm = b.var(Ty::F64, "mm");
    let ss = b.var(Ty::F64, "ss");
    b.push(Stmt::Declare(vec![mm, ss]));
    let ran = b.let1(
        Ty::Bool,
        "ran",
        Op::Binary(BinOp::ILt, Operand::I64(first), Operand::Var(n)),
    );
    b.open();
    let i = b.var(Ty::I64, "i");
    let s = b.var(Ty::F64, "s");
    b.open();
    let e = exp_of_entry_minus(&mut b, x, i, m);
    let s2 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(e)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(s2)],
    });
    b.push(Stmt::Set(mm, Operand::Var(m)));
    b.push(Stmt::Set(ss, Operand::Var(s)));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(ran),
        then,
        els: vec![
            Stmt::Set(mm, Operand::F64(0.0)),
            Stmt::Set(ss, Operand::F64(0.0)),
        ],
    });
    let j = b.var(Ty::I64, "j");
    b.open();
    let e = exp_of_entry_minus(&mut b, x, j, if later_is_join { mm } else { p });
    let q = b.let1(
        Ty::F64,
        "q",
        Op::Binary(BinOp::FDiv, Operand::Var(e), Operand::Var(ss)),
    );
    let body = b.close();
    let out = b.var(arr.clone(), "out");
    b.push(Stmt::Build {
        array: out,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: j,
        body,
        elem: vec![Operand::Var(q)],
    });
    b.push(Stmt::Return(vec![Operand::Var(out)]));
    b.finish(spec(0), vec![x, m, p, n], layout(&[arr]))
}

#[test]
fn a_later_loop_over_the_same_count_reads_the_exponentials_the_first_stored() {
    let mut p = program(vec![sum_of_exps_then_their_quotients(0, true)]);
    verify(&p).unwrap();
    passes::reuse::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    // One `exp`, in the sum, stored in a new array of n reals made before the `if`; the build
    // loads it at its own index, and no longer computes x_j - mm.
    assert_eq!(text.matches("= exp").count(), 1, "{text}");
    assert!(at("new array(f64) count n") < at("if ran"), "{text}");
    assert!(at("= exp") < at("store v"), "{text}");
    assert!(text.contains("= load v") && text.contains("[j"), "{text}");
    assert_eq!(text.matches("fsub").count(), 1, "{text}");
}

#[test]
fn a_later_loop_computing_another_value_or_after_another_test_computes_its_own() {
    // exp(x_j - p) is another value; under `if 1 < n` the build may run while the sum did
    // not (n = 1), and `mm` is not known to be `m` there.
    for f in [
        sum_of_exps_then_their_quotients(0, false),
        sum_of_exps_then_their_quotients(1, true),
    ] {
        let mut p = program(vec![f]);
        passes::reuse::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert_eq!(text.matches("= exp").count(), 2, "{text}");
        assert!(!text.contains("new array"), "{text}");
    }
}

/// `f1(a: array(f64)) -> f64`: reads `a[0]`, or, if `writes`, also stores into it.
fn reads_or_writes_its_array(writes: bool) -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let a = b.named_var(arr, "a".into());
    let y = load(&mut b, Ty::F64, "y", a, Operand::I64(0));
    if writes {
        b.push(Stmt::Store {
            array: Operand::Var(a),
            index: Operand::I64(0),
            slot: 0,
            value: Operand::F64(1.0),
        });
    }
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    b.finish(spec(1), vec![a], layout(&[Ty::F64]))
}

#[test]
fn values_are_shared_across_calls_of_functions_that_write_into_no_given_array() {
    for writes in [false, true] {
        let mut f = sum_of_exps_then_their_quotients(0, true);
        // y = f1(x) first: a call that may write into x makes every read of it suspect.
        let x = f.params[0];
        let y = f.new_var(Ty::F64, "y");
        f.body.insert(
            0,
            Stmt::Let(
                vec![y],
                Op::Call {
                    func: FuncId(1),
                    args: vec![Operand::Var(x)],
                    guard: None,
                },
            ),
        );
        let mut p = program(vec![f, reads_or_writes_its_array(writes)]);
        verify(&p).unwrap();
        passes::reuse::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert_eq!(
            text.matches("= exp").count(),
            if writes { 2 } else { 1 },
            "{text}"
        );
    }
}

/// How the step of `sweep_over` treats the array it is given.
#[derive(Clone, Copy, PartialEq)]
enum Given {
    /// Adds into it in place where `vl_acc_owned` says it may, as an accumulation does, its
    /// lengths checked as `%accumulate` checks them.
    Accumulated,
    /// Adds into it in place whatever it is, its lengths checked as `plus` checks them.
    Written,
    /// As `Accumulated`, its lengths checked as `plus` checks them.
    CheckedAsPlus,
}

/// A reverse sweep's step, `f1(x: array(f64), a: array(f64), s: f64, i: i64) -> (array(f64),
/// f64)`: adds 1 into element `i` of `a` (the data's sensitivity) and returns it with `s + x_i`
/// (the argument's).
fn sweep_step(given: Given) -> Function {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let x = b.named_var(arr.clone(), "x".into());
    let a = b.named_var(arr.clone(), "a".into());
    let s = b.named_var(Ty::F64, "s".into());
    let i = b.named_var(Ty::I64, "i".into());
    let acc = b.var(arr.clone(), "acc");
    b.push(Stmt::Declare(vec![acc]));
    let owned = match given {
        Given::Written => Operand::Bool(true),
        _ => Operand::Var(b.let1(
            Ty::Bool,
            "owned",
            Op::Rt(Rt::AccOwned, vec![Operand::Var(a)]),
        )),
    };
    b.open();
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let c = b.let1(
        arr.clone(),
        "c",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::Var(n),
        },
    );
    let c = b.let1(arr.clone(), "c", Op::Rt(Rt::AccMark, vec![Operand::Var(c)]));
    b.push(Stmt::Set(acc, Operand::Var(c)));
    let copy = b.close();
    b.push(Stmt::If {
        cond: owned,
        then: vec![Stmt::Set(acc, Operand::Var(a))],
        els: copy,
    });
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(acc)));
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(x)));
    let same = b.let1(
        Ty::Bool,
        "same",
        Op::Binary(BinOp::IEq, Operand::Var(n), Operand::Var(m)),
    );
    b.open();
    let fail = if given == Given::Accumulated {
        Rt::AccLengthFail
    } else {
        Rt::LengthFail
    };
    b.effect(Op::Rt(
        fail,
        vec![
            Operand::Str("plus".into()),
            Operand::Var(n),
            Operand::Var(m),
        ],
    ));
    let fail = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(same),
        then: vec![],
        els: fail,
    });
    add_one_in_place(&mut b, acc, i);
    let xi = load(&mut b, Ty::F64, "xi", x, Operand::Var(i));
    let s1 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(xi)),
    );
    b.push(Stmt::Return(vec![Operand::Var(acc), Operand::Var(s1)]));
    b.finish(spec(1), vec![x, a, s, i], layout(&[arr, Ty::F64]))
}

/// The program's entry `f0(x: array(f64), d: array(f64)) -> (f64[, array(f64)])`: an `ifold`
/// over `x`'s indices of the data's sensitivity (from `d`) and the argument's (from 0), each
/// step a call of `sweep_step(given)`; it returns the argument's sensitivity, and the data's
/// if `data_read`.
fn sweep_over(given: Given, data_read: bool) -> Program {
    let mut b = Builder::new();
    let arr = Ty::Array(layout(&[Ty::F64]));
    let x = b.named_var(arr.clone(), "x".into());
    let d = b.named_var(arr.clone(), "d".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let (a, s, i) = (
        b.var(arr.clone(), "a"),
        b.var(Ty::F64, "s"),
        b.var(Ty::I64, "i"),
    );
    b.open();
    let (a1, s1) = (b.var(arr.clone(), "a"), b.var(Ty::F64, "s"));
    b.push(Stmt::Let(
        vec![a1, s1],
        Op::Call {
            func: FuncId(1),
            args: [x, a, s, i].map(Operand::Var).to_vec(),
            guard: None,
        },
    ));
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![a, s],
        init: vec![Operand::Var(d), Operand::F64(0.0)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(a1), Operand::Var(s1)],
    });
    let mut results = vec![Operand::Var(s)];
    if data_read {
        results.push(Operand::Var(a));
    }
    let tys = results
        .iter()
        .map(|r| b.ty(r.var().unwrap()).clone())
        .collect::<Vec<_>>();
    b.push(Stmt::Return(results));
    let f0 = b.finish(spec(0), vec![x, d], layout(&tys));
    let mut p = program(vec![f0, sweep_step(given)]);
    p.main = Some(FuncId(0));
    p
}

#[test]
fn a_sweep_no_longer_computes_a_sensitivity_no_one_reads() {
    let mut p = sweep_over(Given::Accumulated, false);
    verify(&p).unwrap();
    passes::unread::run(&mut p);
    verify(&p).unwrap();
    let main = crate::print::function(&p, FuncId(0));
    let step = crate::print::function(&p, FuncId(1));
    // The loop carries the argument's sensitivity only; the step is given x, s and i, and
    // neither checks, loads nor stores the data's.
    assert!(main.contains("ifold from (0.0) count"), "{main}");
    assert!(main.contains("= call f1(x, s"), "{main}");
    assert!(
        step.starts_with("fn f1(x: array(f64), s: f64, i: i64) -> (f64)"),
        "{step}"
    );
    for gone in ["store", "vl_acc", "vl_length_fail", "new array"] {
        assert!(!step.contains(gone), "{gone}: {step}");
    }
}

#[test]
fn a_sensitivity_read_or_an_array_written_whoever_holds_it_is_still_computed() {
    // The data's sensitivity returned; a step that writes into whatever array it is given;
    // a step whose check is `plus`'s (a user's addition: it must fail as the evaluator does).
    for (given, data_read) in [
        (Given::Accumulated, true),
        (Given::Written, false),
        (Given::CheckedAsPlus, false),
    ] {
        let mut p = sweep_over(given, data_read);
        passes::unread::run(&mut p);
        verify(&p).unwrap();
        let step = crate::print::function(&p, FuncId(1));
        assert!(step.contains("vl_length_fail"), "{step}");
        if given != Given::CheckedAsPlus {
            assert!(step.contains("store acc"), "{step}");
        }
    }
}

#[test]
fn a_branch_that_returns_is_kept_though_it_computes_nothing_read() {
    // f1(c) { if c { return 1 } else { return 2 } }, called by f0: both returns stay.
    let mut b = Builder::new();
    let c = b.named_var(Ty::Bool, "c".into());
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Return(vec![Operand::F64(1.0)])],
        els: vec![Stmt::Return(vec![Operand::F64(2.0)])],
    });
    let f1 = b.finish(spec(1), vec![c], layout(&[Ty::F64]));
    let mut b = Builder::new();
    let c = b.named_var(Ty::Bool, "c".into());
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::Var(c)],
            guard: None,
        },
    );
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let f0 = b.finish(spec(0), vec![c], layout(&[Ty::F64]));
    let mut p = program(vec![f0, f1]);
    p.main = Some(FuncId(0));
    passes::unread::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(1));
    assert!(
        text.contains("if c") && text.contains("return 2.0"),
        "{text}"
    );
}

/// A tape: `f0(n: i64) -> f64` makes an array of `n` records `(f64, f64, f64)`, each `(i, 2i,
/// 3i)` as reals, copies it element by element into a second (if `copied`: `f2`, a function
/// that only loads and builds), and returns `f1(tape)`, which loads slot 1 of record 0. If `escapes`, the tape is also given to the
/// runtime (boxed by reference).
fn tape_read_at_one_slot(copied: bool, escapes: bool) -> Program {
    let rec = layout(&[Ty::F64, Ty::F64, Ty::F64]);
    let tape_ty = Ty::Array(rec.clone());
    let mut b = Builder::new();
    let t = b.named_var(tape_ty.clone(), "t".into());
    let y = load(&mut b, Ty::F64, "y", t, Operand::I64(0));
    // `load` reads slot 0: this one reads slot 1.
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let mut f1 = b.finish(spec(1), vec![t], layout(&[Ty::F64]));
    walk_mut(&mut f1.body, &mut |s| {
        if let Stmt::Let(_, Op::Load { slot, .. }) = s {
            *slot = 1;
        }
    });
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let tape = b.let1(
        tape_ty.clone(),
        "tape",
        Op::NewArray {
            layout: rec.clone(),
            count: Operand::Var(n),
        },
    );
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    for k in 0..3u32 {
        let v = b.let1(
            Ty::F64,
            "v",
            Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(f64::from(k + 1))),
        );
        b.push(Stmt::Store {
            array: Operand::Var(tape),
            index: Operand::Var(i),
            slot: k,
            value: Operand::Var(v),
        });
    }
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body,
    });
    let mut read = tape;
    let mut funcs = vec![];
    if copied {
        // f2(t) copies t element by element into a new array of records.
        let mut c = Builder::new();
        let t = c.named_var(tape_ty.clone(), "t".into());
        let m = c.let1(Ty::I64, "m", Op::Length(Operand::Var(t)));
        let j = c.var(Ty::I64, "j");
        c.open();
        let slots: Vec<Operand> = (0..3u32)
            .map(|k| {
                Operand::Var(c.let1(
                    Ty::F64,
                    "c",
                    Op::Load {
                        array: Operand::Var(t),
                        index: Operand::Var(j),
                        slot: k,
                    },
                ))
            })
            .collect();
        let body = c.close();
        let copy = c.var(tape_ty.clone(), "copy");
        c.push(Stmt::Build {
            array: copy,
            layout: rec.clone(),
            count: Operand::Var(m),
            index: j,
            body,
            elem: slots,
        });
        c.push(Stmt::Return(vec![Operand::Var(copy)]));
        funcs.push(c.finish(spec(2), vec![t], layout(std::slice::from_ref(&tape_ty))));
        read = b.let1(
            tape_ty.clone(),
            "copy",
            Op::Call {
                func: FuncId(2),
                args: vec![Operand::Var(tape)],
                guard: None,
            },
        );
    }
    if escapes {
        b.let1(
            Ty::Boxed,
            "boxed",
            Op::Rt(
                Rt::BoxFlatRef,
                vec![Operand::Var(tape), Operand::I64(0), Operand::I64(0)],
            ),
        );
    }
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::Var(read)],
            guard: None,
        },
    );
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let f0 = b.finish(spec(0), vec![n], layout(&[Ty::F64]));
    let mut p = program([vec![f0, f1], funcs].concat());
    p.main = Some(FuncId(0));
    p
}

#[test]
fn a_tape_keeps_only_the_slots_its_sweep_reads() {
    for copied in [false, true] {
        let mut p = tape_read_at_one_slot(copied, false);
        verify(&p).unwrap();
        passes::fields::run(&mut p);
        verify(&p).unwrap();
        let main = crate::print::function(&p, FuncId(0));
        let read = crate::print::function(&p, FuncId(1));
        // Records of one real, 2i, read at slot 0; the others neither stored nor copied.
        assert!(main.contains("new array(f64) count n"), "{main}");
        assert_eq!(main.matches("store").count(), 1, "{main}");
        assert!(main.contains("fmul x3, 2.0"), "{main}");
        assert!(!main.contains("3.0") && !main.contains("1.0"), "{main}");
        assert!(
            read.contains("t: array(f64)") && read.contains("].0"),
            "{read}"
        );
    }
}

/// Stores 7.0 into slot `slot` of the first record of `tape_read_at_one_slot`'s tape, after
/// the loop that fills it.
fn overwrite_first_record(p: &mut Program, slot: u32) {
    let body = &mut p.funcs[0].body;
    let at = body
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .unwrap();
    let tape = match &body[0] {
        Stmt::Let(vs, _) => vs[0],
        _ => unreachable!("the tape first"),
    };
    body.insert(
        at + 1,
        Stmt::Store {
            array: Operand::Var(tape),
            index: Operand::I64(0),
            slot,
            value: Operand::F64(7.0),
        },
    );
}

/// `tape_read_at_one_slot` whose records store 2i in slots 1 and 2, read at both: the load of
/// slot 2 reads slot 1 instead, and the records keep that one slot, copied or not (the copy's
/// two slots are loads of one element's slots that are one). If `overwritten`, a later store
/// writes slot 2 of record 0 alone: the two slots differ there, and both are kept.
#[test]
fn slots_that_every_write_stores_one_value_into_are_one_slot() {
    for (copied, overwritten) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut p = tape_read_at_one_slot(copied, false);
        // f1 returns t[0].1 + t[0].2.
        let f1 = &mut p.funcs[1];
        let (Stmt::Let(y, Op::Load { array, index, .. }), Stmt::Return(_)) =
            (f1.body[0].clone(), &f1.body[1])
        else {
            unreachable!("f1 loads and returns")
        };
        let y2 = fresh_var(&mut f1.vars, Ty::F64, "y");
        let sum = fresh_var(&mut f1.vars, Ty::F64, "sum");
        f1.body = vec![
            f1.body[0].clone(),
            Stmt::Let(
                vec![y2],
                Op::Load {
                    array,
                    index,
                    slot: 2,
                },
            ),
            Stmt::Let(
                vec![sum],
                Op::Binary(BinOp::FAdd, Operand::Var(y[0]), Operand::Var(y2)),
            ),
            Stmt::Return(vec![Operand::Var(sum)]),
        ];
        let mut twice = None;
        walk(&p.funcs[0].body, &mut |s| {
            if let Stmt::Store { slot: 1, value, .. } = s {
                twice = Some(value.clone());
            }
        });
        walk_mut(&mut p.funcs[0].body, &mut |s| {
            if let Stmt::Store { slot: 2, value, .. } = s {
                *value = twice.clone().unwrap();
            }
        });
        if overwritten {
            overwrite_first_record(&mut p, 2);
        }
        verify(&p).unwrap();
        passes::fields::run(&mut p);
        verify(&p).unwrap();
        let main = crate::print::function(&p, FuncId(0));
        let read = crate::print::function(&p, FuncId(1));
        assert!(main.contains("fmul x3, 2.0"), "{main}");
        if overwritten {
            assert!(main.contains("new array(f64, f64) count n"), "{main}");
            assert!(read.contains("].0") && read.contains("].1"), "{read}");
            assert_eq!(main.matches("store").count(), 3, "{main}");
            assert!(main.contains("7.0"), "{main}");
        } else {
            assert!(main.contains("new array(f64) count n"), "{main}");
            assert_eq!(read.matches("].0").count(), 2, "{read}");
            assert_eq!(main.matches("store").count(), 1, "{main}");
        }
    }
}

/// A slot that every write stores its own index into (as a real) is read as the index the
/// load is at, and dropped; forward mode's copies of the tape keep the property. One write of
/// another value (at a constant index) keeps the slot.
#[test]
fn a_slot_that_holds_its_own_index_is_read_as_the_index() {
    for (copied, overwritten) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut p = tape_read_at_one_slot(copied, false);
        // Slot 1 stores x = i64tof64 i itself (f1 reads t[0].1).
        let mut index = None;
        walk(&p.funcs[0].body, &mut |s| {
            if let Stmt::Let(vs, Op::Unary(UnOp::I64ToF64, _)) = s {
                index = Some(vs[0]);
            }
        });
        walk_mut(&mut p.funcs[0].body, &mut |s| {
            if let Stmt::Store { slot: 1, value, .. } = s {
                *value = Operand::Var(index.unwrap());
            }
        });
        if overwritten {
            overwrite_first_record(&mut p, 1);
        }
        verify(&p).unwrap();
        passes::fields::run(&mut p);
        verify(&p).unwrap();
        let main = crate::print::function(&p, FuncId(0));
        let read = crate::print::function(&p, FuncId(1));
        if overwritten {
            assert!(read.contains("load"), "{read}");
            assert!(main.contains("new array(f64) count n"), "{main}");
            assert!(main.contains("7.0"), "{main}");
        } else {
            assert!(!read.contains("load"), "{read}");
            // The index, 0, converted (and folded, where the analysis by site reads it).
            assert!(
                read.contains("i64tof64 0i") || read.contains("return 0.0"),
                "{read}"
            );
            assert!(!main.contains("7.0"), "{main}");
        }
    }
}

/// A slot copied into an array whose layout no load reads (which keeps its first slot all
/// the same): the copy's store goes with the load it stores, which reads a dropped slot.
/// Before, the store stayed and its value was undefined (found by a nested reverse-mode
/// program whose C did not compile).
#[test]
fn a_copy_into_an_array_no_one_reads_goes_with_its_load() {
    let mut p = tape_read_at_one_slot(false, false);
    let f0 = &mut p.funcs[0];
    let tape = match &f0.body[0] {
        Stmt::Let(vs, _) => vs[0],
        _ => unreachable!("the tape first"),
    };
    let copy = fresh_var(&mut f0.vars, Ty::Array(layout(&[Ty::F64])), "copy");
    let x = fresh_var(&mut f0.vars, Ty::F64, "x");
    let at = f0
        .body
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .unwrap();
    f0.body.splice(
        at + 1..at + 1,
        [
            Stmt::Let(
                vec![copy],
                Op::NewArray {
                    layout: layout(&[Ty::F64]),
                    count: Operand::I64(1),
                },
            ),
            Stmt::Let(
                vec![x],
                Op::Load {
                    array: Operand::Var(tape),
                    index: Operand::I64(0),
                    slot: 0,
                },
            ),
            Stmt::Store {
                array: Operand::Var(copy),
                index: Operand::I64(0),
                slot: 0,
                value: Operand::Var(x),
            },
        ],
    );
    verify(&p).unwrap();
    passes::fields::run(&mut p);
    verify(&p).unwrap();
    let main = crate::print::function(&p, FuncId(0));
    assert!(!main.contains("copy"), "{main}");
    assert_eq!(main.matches("store").count(), 1, "{main}");
}

#[test]
fn a_tape_the_runtime_sees_keeps_every_slot() {
    let mut p = tape_read_at_one_slot(false, true);
    passes::fields::run(&mut p);
    verify(&p).unwrap();
    let main = crate::print::function(&p, FuncId(0));
    assert_eq!(main.matches("store").count(), 3, "{main}");
    assert!(main.contains("new array(f64, f64, f64)"), "{main}");
}

#[test]
fn a_call_that_may_not_return_runs_though_no_one_reads_its_result() {
    // f1(x) = f1(x + 1), never returning; f0 calls it and returns 0.
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let x1 = b.let1(
        Ty::F64,
        "x",
        Op::Binary(BinOp::FAdd, Operand::Var(x), Operand::F64(1.0)),
    );
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::Var(x1)],
            guard: None,
        },
    );
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let f1 = b.finish(spec(1), vec![x], layout(&[Ty::F64]));
    let mut b = Builder::new();
    b.let1(
        Ty::F64,
        "y",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::F64(0.0)],
            guard: None,
        },
    );
    b.push(Stmt::Return(vec![Operand::F64(0.0)]));
    let f0 = b.finish(spec(0), vec![], layout(&[Ty::F64]));
    let mut p = program(vec![f0, f1]);
    p.main = Some(FuncId(0));
    passes::unread::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("call f1("), "{text}");
}

/// `fn(k: K, n: i64, v: array(f64)) -> f64 { return ifold (fun a i -> if i = k then a + 2 v_i
/// else a) 0.5 n }`, the index compared as an integer or, converted, as a real (paper 002
/// Fig. 7e's one-hot fold as written).
fn selection_fold(real: bool) -> Function {
    let mut b = Builder::new();
    let k = b.named_var(if real { Ty::F64 } else { Ty::I64 }, "k".into());
    let n = b.named_var(Ty::I64, "n".into());
    let v = b.named_var(Ty::Array(layout(&[Ty::F64])), "v".into());
    let a = b.var(Ty::F64, "a");
    let i = b.var(Ty::I64, "i");
    let x = b.var(Ty::F64, "x");
    b.open();
    b.push(Stmt::Declare(vec![x]));
    b.push(Stmt::Site(1));
    let c = if real {
        let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
        b.let1(
            Ty::Bool,
            "c",
            Op::Binary(BinOp::FEq, Operand::Var(r), Operand::Var(k)),
        )
    } else {
        b.let1(
            Ty::Bool,
            "c",
            Op::Binary(BinOp::IEq, Operand::Var(k), Operand::Var(i)),
        )
    };
    let prefix = b.close();
    b.open();
    let vi = load(&mut b, Ty::F64, "vi", v, Operand::Var(i));
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FMul, Operand::F64(2.0), Operand::Var(vi)),
    );
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(a), Operand::Var(t)),
    );
    b.push(Stmt::Set(x, Operand::Var(s)));
    let then = b.close();
    let mut body = prefix;
    body.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els: vec![Stmt::Set(x, Operand::Var(a))],
    });
    b.push(Stmt::Ifold {
        accs: vec![a],
        init: vec![Operand::F64(0.5)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(x)],
    });
    b.push(Stmt::Return(vec![Operand::Var(a)]));
    b.finish(spec(0), vec![k, n, v], layout(&[Ty::F64]))
}

#[test]
fn a_fold_that_does_something_at_one_index_alone_is_its_step_there() {
    for real in [false, true] {
        let mut f = selection_fold(real);
        verify(&with_sites(f.clone())).unwrap();
        passes::scalar_optimise(&mut f);
        let mut p = with_sites(f);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        // No loop: the step at k, from 0.5, if k is an index below n; 0.5 if not.
        assert!(!text.contains("ifold"), "{text}");
        assert_eq!(text.matches("fadd 0.5").count(), 1, "{text}");
        assert!(text.contains(":= 0.5"), "{text}");
        // The comparison of the index with k is known inside: no `if` on it is left.
        assert!(!text.contains("if c"), "{text}");
        // The step's call site, in the step at k and after the fold where its last step was
        // not k's (an error after the loop reports it).
        assert_eq!(text.matches("site 1").count(), 2, "{text}");
        let after = text.rfind("site 1").unwrap();
        assert!(text[..after].rfind("if ran").is_some(), "{text}");
        if real {
            // A real k is an index if it is in [0, n) and converts to an integer and back.
            assert!(text.contains("= fge k, 0.0"), "{text}");
            assert!(text.contains("= f64toi64 k"), "{text}");
            assert!(text.contains("if exact"), "{text}");
        } else {
            assert!(text.contains("= ilt k, 0i"), "{text}");
            assert!(text.contains("= ilt k, n"), "{text}");
        }
        passes::loops::run(&mut p);
        verify(&p).unwrap();
    }
}

#[test]
fn a_fold_that_changes_something_at_other_indices_is_a_loop() {
    // The second branch adds 1: every index counts.
    let mut f = selection_fold(false);
    let Stmt::Ifold { body, .. } = &mut f.body[0] else {
        panic!("the fold")
    };
    let Some(Stmt::If { els, .. }) = body.last_mut() else {
        panic!("the if")
    };
    els[0] = Stmt::Set(Var(5), Operand::F64(1.0));
    passes::scalar_optimise(&mut f);
    let p = with_sites(f);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("ifold"), "{text}");
}

#[test]
fn a_fold_that_keeps_its_accumulator_or_has_no_steps_is_its_initial_value() {
    // ifold (fun a i -> a) 3 n, and ifold (fun a i -> a + 1) 3 0.
    for (count, step) in [(Operand::Var(Var(0)), false), (Operand::I64(0), true)] {
        let mut b = Builder::new();
        let n = b.named_var(Ty::I64, "n".into());
        let a = b.var(Ty::F64, "a");
        let i = b.var(Ty::I64, "i");
        b.open();
        // The step records a call site: the site after the fold, if it ran.
        b.push(Stmt::Site(1));
        let next = if step {
            Operand::Var(b.let1(
                Ty::F64,
                "t",
                Op::Binary(BinOp::FAdd, Operand::Var(a), Operand::F64(1.0)),
            ))
        } else {
            Operand::Var(a)
        };
        let body = b.close();
        b.push(Stmt::Ifold {
            accs: vec![a],
            init: vec![Operand::F64(3.0)],
            count,
            index: i,
            body,
            next: vec![next],
        });
        b.push(Stmt::Return(vec![Operand::Var(a)]));
        let mut p = with_sites(b.finish(spec(0), vec![n], layout(&[Ty::F64])));
        verify(&p).unwrap();
        passes::simplify::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert!(!text.contains("ifold"), "{text}");
        assert!(text.contains("return 3.0"), "{text}");
        // A fold of n steps leaves the site of its step if n > 0; one of none leaves none.
        assert_eq!(text.contains("site 1"), !step, "{text}");
    }
}

#[test]
fn a_condition_is_known_in_its_branches_and_same_branches_are_one() {
    // if c { if c { return x + 1 } else { return x - 1 } } else { if c { return 2 x }
    // else { y := sqrt x } else { y := sqrt x } ... }: the inner ifs are the branches
    // taken, and an if whose branches are the same is that code.
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let c = b.named_var(Ty::Bool, "c".into());
    let y = b.var(Ty::F64, "y");
    let plus = b.let1(
        Ty::F64,
        "p",
        Op::Binary(BinOp::FAdd, Operand::Var(x), Operand::F64(1.0)),
    );
    let minus = b.let1(
        Ty::F64,
        "m",
        Op::Binary(BinOp::FSub, Operand::Var(x), Operand::F64(1.0)),
    );
    let inner = |t: Operand, e: Operand| Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Set(y, t)],
        els: vec![Stmt::Set(y, e)],
    };
    b.push(Stmt::Declare(vec![y]));
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![inner(Operand::Var(plus), Operand::Var(minus))],
        els: vec![inner(Operand::F64(7.0), Operand::Var(minus))],
    });
    let z = b.var(Ty::F64, "z");
    b.push(Stmt::Declare(vec![z]));
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Set(z, Operand::Var(y))],
        els: vec![Stmt::Set(z, Operand::Var(y))],
    });
    b.push(Stmt::Return(vec![Operand::Var(z)]));
    let mut p = program(vec![b.finish(spec(0), vec![x, c], layout(&[Ty::F64]))]);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert_eq!(text.matches("if c").count(), 1, "{text}");
    assert!(!text.contains("7.0"), "{text}");
    assert!(text.contains(":= p"), "{text}");
    assert!(text.contains(":= m"), "{text}");

    // Branches that differ in the sign of a zero are not the same (`0.0 == -0.0` in Rust).
    let mut b = Builder::new();
    let c = b.named_var(Ty::Bool, "c".into());
    let y = b.var(Ty::F64, "y");
    b.push(Stmt::Declare(vec![y]));
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then: vec![Stmt::Set(y, Operand::F64(0.0))],
        els: vec![Stmt::Set(y, Operand::F64(-0.0))],
    });
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let mut p = program(vec![b.finish(spec(0), vec![c], layout(&[Ty::F64]))]);
    passes::simplify::run(&mut p);
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("-0.0") && text.contains("if c"), "{text}");
}

#[test]
fn the_exact_ring_rules_are_applied_and_the_inexact_not() {
    // x - 0, x + -0, -0 + x, x / 1 and x * 1 are x; x + 0, x * 0 and x - x are not folded.
    let exact = [
        Op::Binary(BinOp::FSub, Operand::Var(Var(0)), Operand::F64(0.0)),
        Op::Binary(BinOp::FAdd, Operand::Var(Var(0)), Operand::F64(-0.0)),
        Op::Binary(BinOp::FAdd, Operand::F64(-0.0), Operand::Var(Var(0))),
        Op::Binary(BinOp::FDiv, Operand::Var(Var(0)), Operand::F64(1.0)),
        Op::Binary(BinOp::FMul, Operand::Var(Var(0)), Operand::F64(1.0)),
    ];
    let inexact = [
        Op::Binary(BinOp::FAdd, Operand::Var(Var(0)), Operand::F64(0.0)),
        Op::Binary(BinOp::FMul, Operand::Var(Var(0)), Operand::F64(0.0)),
        Op::Binary(BinOp::FSub, Operand::Var(Var(0)), Operand::Var(Var(0))),
        Op::Binary(BinOp::FSub, Operand::Var(Var(0)), Operand::F64(-0.0)),
    ];
    for (op, folds) in exact
        .iter()
        .map(|o| (o, true))
        .chain(inexact.iter().map(|o| (o, false)))
    {
        let mut b = Builder::new();
        let x = b.named_var(Ty::F64, "x".into());
        let t = b.let1(Ty::F64, "t", op.clone());
        b.push(Stmt::Return(vec![Operand::Var(t)]));
        let mut p = program(vec![b.finish(spec(0), vec![x], layout(&[Ty::F64]))]);
        passes::simplify::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert_eq!(text.contains("return x"), folds, "{op:?}: {text}");
    }
}

#[test]
fn zero_plus_a_real_that_is_never_minus_zero_is_that_real() {
    // 0 + y is y where y is never -0 (0 + -0 is +0): a square, an exponential, a sum with such
    // a term, a difference whose first term is one, the root of one. Not for y = 2x, the root
    // of x, or x - x * x, which may be -0 (x = -0).
    let x = || Operand::Var(Var(0));
    let square = || Op::Binary(BinOp::FMul, x(), x());
    type Def = fn(&mut Builder, Operand, Op) -> Op;
    let cases: [(&str, Def, bool); 8] = [
        ("x * x", |_, _, sq| sq, true),
        ("exp x", |_, x, _| Op::Unary(UnOp::Exp, x), true),
        (
            "x * x + x",
            |b, x, sq| {
                let s = b.let1(Ty::F64, "s", sq);
                Op::Binary(BinOp::FAdd, Operand::Var(s), x)
            },
            true,
        ),
        (
            "x * x - x",
            |b, x, sq| {
                let s = b.let1(Ty::F64, "s", sq);
                Op::Binary(BinOp::FSub, Operand::Var(s), x)
            },
            true,
        ),
        (
            "sqrt (x * x)",
            |b, _, sq| {
                let s = b.let1(Ty::F64, "s", sq);
                Op::Unary(UnOp::Sqrt, Operand::Var(s))
            },
            true,
        ),
        (
            "x * 2",
            |_, x, _| Op::Binary(BinOp::FMul, x, Operand::F64(2.0)),
            false,
        ),
        ("sqrt x", |_, x, _| Op::Unary(UnOp::Sqrt, x), false),
        (
            "x - x * x",
            |b, x, sq| {
                let s = b.let1(Ty::F64, "s", sq);
                Op::Binary(BinOp::FSub, x, Operand::Var(s))
            },
            false,
        ),
    ];
    for (name, def, folds) in cases {
        let mut b = Builder::new();
        let xv = b.named_var(Ty::F64, "x".into());
        let op = def(&mut b, Operand::Var(xv), square());
        let y = b.let1(Ty::F64, "y", op);
        let t = b.let1(
            Ty::F64,
            "t",
            Op::Binary(BinOp::FAdd, Operand::F64(0.0), Operand::Var(y)),
        );
        b.push(Stmt::Return(vec![Operand::Var(t)]));
        let mut p = program(vec![b.finish(spec(0), vec![xv], layout(&[Ty::F64]))]);
        passes::simplify::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert_eq!(text.contains("fadd 0.0"), !folds, "{name}: {text}");
    }
}

/// `fn(n: i64, v: array(f64)) -> f64`: `b = build n (fun i -> check v_i < 10; exp v_i)` (site
/// 1 in its step), then site 2, `m = length b`, and `ifold (fun a j -> a + b_j) 0 m`, or, with
/// `impure`, a consumer that also writes the real it reads: the producer of a fold over its
/// elements (paper 002's build/ifold fusion).
fn producer_and_consumer(impure: bool) -> Function {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let v = b.named_var(arr.clone(), "v".into());
    let built = b.var(arr, "b");
    let i = b.var(Ty::I64, "i");
    b.open();
    b.push(Stmt::Site(1));
    let vi = load(&mut b, Ty::F64, "vi", v, Operand::Var(i));
    let ok = b.let1(
        Ty::Bool,
        "ok",
        Op::Binary(BinOp::FLt, Operand::Var(vi), Operand::F64(10.0)),
    );
    b.open();
    b.effect(Op::Rt(
        Rt::FailMismatch,
        vec![Operand::I64(-1), Operand::Null, Operand::Null],
    ));
    let fail = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(ok),
        then: vec![],
        els: fail,
    });
    let e = b.let1(Ty::F64, "e", Op::Unary(UnOp::Exp, Operand::Var(vi)));
    let step = b.close();
    b.push(Stmt::Build {
        array: built,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body: step,
        elem: vec![Operand::Var(e)],
    });
    b.push(Stmt::Site(2));
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(built)));
    let a = b.var(Ty::F64, "a");
    let j = b.var(Ty::I64, "j");
    b.open();
    let bj = load(&mut b, Ty::F64, "bj", built, Operand::Var(j));
    if impure {
        b.effect(Op::Rt(Rt::WriteReal, vec![Operand::Var(bj)]));
    }
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(a), Operand::Var(bj)),
    );
    let fold = b.close();
    b.push(Stmt::Ifold {
        accs: vec![a],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(m),
        index: j,
        body: fold,
        next: vec![Operand::Var(s)],
    });
    b.push(Stmt::Return(vec![Operand::Var(a)]));
    b.finish(spec(0), vec![n, v], layout(&[Ty::F64]))
}

/// A program of `f` with three call sites.
fn with_sites(f: Function) -> Program {
    let site = Site {
        prefix: "t.vlad:1:1: error: ".into(),
        excerpt: None,
    };
    Program {
        sites: vec![site; 3],
        ..program(vec![f])
    }
}

#[test]
fn a_build_read_in_order_by_the_fold_after_it_is_computed_in_the_fold() {
    let mut f = producer_and_consumer(false);
    verify(&with_sites(f.clone())).unwrap();
    assert!(passes::fuse::function(&mut f));
    let p = with_sites(f);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // No array: the step (its check and its exp included) at the top of the fold's, whose
    // count is n; the site between the loops after the fold, the step's own in the fold.
    assert!(!text.contains("= build"), "{text}");
    assert!(text.contains("count n index j"), "{text}");
    let (fold, exp, site1, site2) = (
        text.find("= ifold").unwrap(),
        text.find("exp vi").unwrap(),
        text.find("site 1").unwrap(),
        text.find("site 2").unwrap(),
    );
    assert!(fold < site1 && site1 < exp && exp < site2, "{text}");
    assert!(text.contains("vl_fail_mismatch"), "{text}");
}

#[test]
fn a_build_whose_consumer_has_effects_is_made() {
    // The consumer writes: the producer's checks would then interleave with the writes.
    let mut f = producer_and_consumer(true);
    passes::fuse::function(&mut f);
    let p = with_sites(f);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("= build"), "{text}");
}

#[test]
fn a_matrix_whose_rows_are_only_read_is_not_made() {
    // o = build m (fun i -> build n (fun k -> u_i w_k)); ifold (fun s i -> ifold (fun s k ->
    // s + o_i_k) s n) 0 m, the outer product of paper 002's NNMF summed: neither the matrix
    // nor a row is made.
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mat = Ty::Array(layout(std::slice::from_ref(&arr)));
    let mut b = Builder::new();
    let u = b.named_var(arr.clone(), "u".into());
    let w = b.named_var(arr.clone(), "w".into());
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(u)));
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(w)));
    let o = b.var(mat, "o");
    let (i, k) = (b.var(Ty::I64, "i"), b.var(Ty::I64, "k"));
    let row = b.var(arr.clone(), "row");
    b.open();
    let ui = load(&mut b, Ty::F64, "ui", u, Operand::Var(i));
    b.open();
    let wk = load(&mut b, Ty::F64, "wk", w, Operand::Var(k));
    let x = b.let1(
        Ty::F64,
        "x",
        Op::Binary(BinOp::FMul, Operand::Var(ui), Operand::Var(wk)),
    );
    let inner = b.close();
    b.push(Stmt::Build {
        array: row,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: k,
        body: inner,
        elem: vec![Operand::Var(x)],
    });
    let outer = b.close();
    b.push(Stmt::Build {
        array: o,
        layout: layout(std::slice::from_ref(&arr)),
        count: Operand::Var(m),
        index: i,
        body: outer,
        elem: vec![Operand::Var(row)],
    });
    let (s, s2) = (b.var(Ty::F64, "s"), b.var(Ty::F64, "s"));
    let (i2, k2) = (b.var(Ty::I64, "i"), b.var(Ty::I64, "k"));
    b.open();
    let r = load(&mut b, arr, "r", o, Operand::Var(i2));
    b.open();
    let rk = load(&mut b, Ty::F64, "rk", r, Operand::Var(k2));
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(s2), Operand::Var(rk)),
    );
    let sum_row = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s2],
        init: vec![Operand::Var(s)],
        count: Operand::Var(n),
        index: k2,
        body: sum_row,
        next: vec![Operand::Var(t)],
    });
    let sum = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(m),
        index: i2,
        body: sum,
        next: vec![Operand::Var(s2)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let mut f = b.finish(spec(0), vec![u, w], layout(&[Ty::F64]));
    verify(&program(vec![f.clone()])).unwrap();
    passes::scalar_optimise(&mut f);
    let p = program(vec![f]);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("= build"), "{text}");
    assert!(!text.contains("new array"), "{text}");
    assert_eq!(text.matches("= ifold").count(), 2, "{text}");
    assert!(text.contains("fmul ui"), "{text}");
}

/// The parameters `a0: array(f64)`, `c: bool`, `n: i64`.
fn array_flag_count(b: &mut Builder) -> (Var, Var, Var) {
    let a0 = b.named_var(Ty::Array(layout(&[Ty::F64])), "a0".into());
    let c = b.named_var(Ty::Bool, "c".into());
    let n = b.named_var(Ty::I64, "n".into());
    (a0, c, n)
}

/// `f0(a0: array(f64), c: bool, n: i64)`: `acc := 0; for i < n { x = a0[i]; if c { acc += x }
/// else { for j < n { if c { acc += 1 } else { acc -= 1 } } } }; return acc`, where `c` is the
/// parameter, or (`assigned`) a variable the loop also assigns.
fn branch_in_a_loop(assigned: bool) -> Program {
    let mut b = Builder::new();
    let (a0, c, n) = array_flag_count(&mut b);
    let acc = b.var(Ty::F64, "acc");
    b.push(Stmt::Declare(vec![acc]));
    b.push(Stmt::Set(acc, Operand::F64(0.0)));
    let cond = if assigned {
        let v = b.var(Ty::Bool, "v");
        b.push(Stmt::Declare(vec![v]));
        b.push(Stmt::Set(v, Operand::Var(c)));
        v
    } else {
        c
    };
    let step = |b: &mut Builder, op: BinOp, x: Operand| {
        let t = b.let1(Ty::F64, "t", Op::Binary(op, Operand::Var(acc), x));
        b.push(Stmt::Set(acc, Operand::Var(t)));
    };
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = load(&mut b, Ty::F64, "x", a0, Operand::Var(i));
    b.open();
    step(&mut b, BinOp::FAdd, Operand::Var(x));
    let then = b.close();
    b.open();
    let j = b.var(Ty::I64, "j");
    b.open();
    b.open();
    step(&mut b, BinOp::FAdd, Operand::F64(1.0));
    let inner_then = b.close();
    b.open();
    step(&mut b, BinOp::FSub, Operand::F64(1.0));
    let inner_els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(cond),
        then: inner_then,
        els: inner_els,
    });
    let inner = b.close();
    b.push(Stmt::For {
        index: j,
        count: Operand::Var(n),
        body: inner,
    });
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(cond),
        then,
        els,
    });
    if assigned {
        b.push(Stmt::Set(cond, Operand::Var(c)));
    }
    program(vec![loop_returning(b, i, acc, [a0, c, n])])
}

/// Closes the open block as the body of `for i < n`, returns `acc` after it, and finishes
/// `f0(a0, c, n)` (the parameters of `array_flag_count`).
fn loop_returning(mut b: Builder, i: Var, acc: Var, [a0, c, n]: [Var; 3]) -> Function {
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body,
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    b.finish(spec(0), vec![a0, c, n], layout(&[Ty::F64]))
}

/// Function f0 of `p` as printed after `passes::version`, the program verified before and
/// after it.
fn f0_after_version(p: &mut Program) -> String {
    verify(p).unwrap();
    passes::version::run(p);
    verify(p).unwrap();
    crate::print::function(p, FuncId(0))
}

#[test]
fn a_loop_branching_on_an_invariant_condition_is_unswitched() {
    let text = f0_after_version(&mut branch_in_a_loop(false));
    // The condition is tested once, before the loops: the first loop adds x, the second
    // (with the inner loop) subtracts 1; neither tests it again.
    assert_eq!(text.matches("if c").count(), 1, "{text}");
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("if c") < at("for i"), "{text}");
    assert_eq!(text.matches("for ").count(), 3, "{text}");
    assert_eq!(text.matches("fadd acc").count(), 1, "{text}");
    assert_eq!(text.matches("fsub acc").count(), 1, "{text}");
    assert!(!text.contains("fadd acc3, 1.0"), "{text}");
    assert!(at("fadd acc") < at("} else {"), "{text}");
    assert!(at("} else {") < at("fsub acc"), "{text}");
}

#[test]
fn a_loop_branching_on_a_condition_it_changes_is_not_unswitched() {
    let text = f0_after_version(&mut branch_in_a_loop(true));
    // The outer loop assigns v: it still tests it in each step. The inner loop does not: it
    // runs in two versions there.
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("for i") < at("if v"), "{text}");
    assert_eq!(text.matches("for i").count(), 1, "{text}");
    assert_eq!(text.matches("for j").count(), 2, "{text}");
    assert_eq!(text.matches("if v").count(), 2, "{text}");
}

#[test]
fn the_scalar_optimisation_is_checked_after_each_sub_pass() {
    // Forward `grad` of a dot product: `sparse` guards its fold. Every sub-pass leaves a
    // function the verifier accepts.
    let mut f = forward_grad_dot(0.0);
    let mut passes_seen = Vec::new();
    passes::scalar_optimise_checked(&mut f, &mut |f, pass| {
        passes_seen.push(pass.to_string());
        verify(&program(vec![f.clone()])).map_err(|e| e.message)
    })
    .unwrap();
    assert_eq!(passes_seen[0], "simplify");
    assert!(
        passes_seen.contains(&"sparse".to_string()),
        "{passes_seen:?}"
    );
    assert!(passes_seen.contains(&"scalars::replace".to_string()));
    // A failing check ends it, named by its sub-pass.
    let mut f = forward_grad_dot(0.0);
    let e = passes::scalar_optimise_checked(&mut f, &mut |_, pass| match pass {
        "sparse" => Err("broken".into()),
        _ => Ok(()),
    })
    .unwrap_err();
    assert_eq!(e, "after sparse: broken");
    // The pipeline verifies each function after inlining, before its scalar optimisation.
    let mut p = program(vec![use_out_of_scope()]);
    let e = passes::inline::run_checked(&mut p, true).unwrap_err();
    assert!(e.message.starts_with("after inlining: "), "{e}");
    assert!(e.message.contains("out of its scope"), "{e}");
}

/// `f0(x: f64, y: f64)` calls `f1` with each of `calls` (0 for x, 1 for y), and f1's third
/// parameter is assigned where `assigns`; f1 returns the sum of its parameters.
fn calls_with_equal_arguments(calls: &[[usize; 3]], assigns: bool) -> Program {
    let mut b = Builder::new();
    let x = b.named_var(Ty::F64, "x".into());
    let y = b.named_var(Ty::F64, "y".into());
    let call = |b: &mut Builder, args: [Var; 3]| {
        b.let1(
            Ty::F64,
            "t",
            Op::Call {
                func: FuncId(1),
                args: args.iter().copied().map(Operand::Var).collect(),
                guard: None,
            },
        )
    };
    let mut t = x;
    for args in calls {
        t = call(&mut b, args.map(|k| [x, y][k]));
    }
    b.push(Stmt::Return(vec![Operand::Var(t)]));
    let main = b.finish(spec(0), vec![x, y], layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a: Vec<Var> = (0..3)
        .map(|k| b.named_var(Ty::F64, format!("a{k}")))
        .collect();
    if assigns {
        b.push(Stmt::Set(a[2], Operand::F64(1.0)));
    }
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(a[0]), Operand::Var(a[1])),
    );
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(a[2])),
    );
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let callee = b.finish(spec(1), a, layout(&[Ty::F64]));
    Program {
        main: Some(FuncId(0)),
        ..program(vec![main, callee])
    }
}

#[test]
fn a_parameter_every_call_gives_another_ones_value_is_read_as_that_one() {
    let mut p = calls_with_equal_arguments(&[[0, 0, 1]], false);
    verify(&p).unwrap();
    assert!(passes::same_args::run(&mut p));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(1));
    assert!(text.contains("= fadd a0, a0"), "{text}");
    assert!(text.contains(", a2\n"), "{text}");
    // The entry point is called from outside: its parameters stay.
    assert!(crate::print::function(&p, FuncId(0)).contains("call f1(x, x, y)"));
    // `unread` drops the parameter no one reads now, and the callers' argument.
    passes::unread::run(&mut p);
    verify(&p).unwrap();
    assert!(crate::print::program(&p).contains("call f1(x, y)"));

    // Calls that pass different values for a1 (x, then y), or a2 assigned: nothing changes.
    for (calls, assigns) in [
        (&[[0, 0, 1], [0, 1, 1]], false),
        (&[[0, 1, 1], [0, 1, 1]], true),
    ] {
        let mut p = calls_with_equal_arguments(calls, assigns);
        let before = crate::print::program(&p);
        assert!(!passes::same_args::run(&mut p), "{before}");
        assert_eq!(crate::print::program(&p), before);
    }
}

#[test]
fn an_array_built_with_a_variable_count_has_that_length() {
    // b = build count n { i as f64 }; s = ifold count n { s + b[i] checked against length b }
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let arr = b.var(Ty::Array(layout(&[Ty::F64])), "b");
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let body = b.close();
    b.push(Stmt::Build {
        array: arr,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(x)],
    });
    let len = b.let1(Ty::I64, "len", Op::Length(Operand::Var(arr)));
    let s = b.var(Ty::F64, "s");
    let j = b.var(Ty::I64, "j");
    b.open();
    let z = add_checked_element(&mut b, s, arr, j, len);
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: j,
        body,
        next: vec![Operand::Var(z)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let mut p = with_sites(b.finish(spec(0), vec![n], layout(&[Ty::F64])));
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The length is n, and j < n: no check.
    assert!(!text.contains("length"), "{text}");
    assert!(!text.contains("vl_index"), "{text}");
}

/// `ok := #t; for i < n { ok := ok and a[i] * 0 = 0 }; b = new array count n; if ok { for j < n
/// { b[j] = a[j] + 1 } } else { for k < n { b[k] = a[k] - 1 } }; return b`: a guard, and the
/// two loops on it. Where `adds`, the fast loop also adds into an accumulator declared
/// before the guard.
fn guard_then_two_loops(adds: bool) -> Program {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a".into());
    let n = b.named_var(Ty::I64, "n".into());
    let acc = b.var(Ty::F64, "acc");
    b.push(Stmt::Declare(vec![acc]));
    b.push(Stmt::Set(acc, Operand::F64(0.0)));
    let ok = b.var(Ty::Bool, "ok");
    b.push(Stmt::Declare(vec![ok]));
    b.push(Stmt::Set(ok, Operand::Bool(true)));
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = load(&mut b, Ty::F64, "x", a, Operand::Var(i));
    let z = b.let1(
        Ty::F64,
        "z",
        Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(0.0)),
    );
    let e = b.let1(
        Ty::Bool,
        "e",
        Op::Binary(BinOp::FEq, Operand::Var(z), Operand::F64(0.0)),
    );
    let o = b.let1(
        Ty::Bool,
        "o",
        Op::Binary(BinOp::And, Operand::Var(ok), Operand::Var(e)),
    );
    b.push(Stmt::Set(ok, Operand::Var(o)));
    let guard = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body: guard,
    });
    let out = b.let1(
        arr,
        "b",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::Var(n),
        },
    );
    let step = |b: &mut Builder, op: BinOp, with_acc: bool| {
        let j = b.var(Ty::I64, "j");
        b.open();
        b.push(Stmt::Site(1));
        let y = load(b, Ty::F64, "y", a, Operand::Var(j));
        let w = b.let1(
            Ty::F64,
            "w",
            Op::Binary(op, Operand::Var(y), Operand::F64(1.0)),
        );
        if with_acc {
            let t = b.let1(
                Ty::F64,
                "t",
                Op::Binary(BinOp::FAdd, Operand::Var(acc), Operand::Var(w)),
            );
            b.push(Stmt::Set(acc, Operand::Var(t)));
        }
        b.push(Stmt::Store {
            array: Operand::Var(out),
            index: Operand::Var(j),
            slot: 0,
            value: Operand::Var(w),
        });
        let body = b.close();
        vec![Stmt::For {
            index: j,
            count: Operand::Var(n),
            body,
        }]
    };
    let then = step(&mut b, BinOp::FAdd, adds);
    let els = step(&mut b, BinOp::FSub, adds);
    b.push(Stmt::If {
        cond: Operand::Var(ok),
        then,
        els,
    });
    b.push(Stmt::Return(vec![Operand::Var(out), Operand::Var(acc)]));
    let results = layout(&[Ty::Array(layout(&[Ty::F64])), Ty::F64]);
    with_sites(b.finish(spec(0), vec![a, n], results))
}

#[test]
fn a_guard_runs_in_the_loop_of_the_step_it_guards() {
    let text = f0_after_version(&mut guard_then_two_loops(false));
    // One loop computes the guard and the fast step; the slow loop runs if the guard failed.
    assert_eq!(text.matches("for ").count(), 2, "{text}");
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("for j") < at("= feq"), "{text}");
    assert!(at("= feq") < at("= fadd"), "{text}");
    assert!(at("= fadd") < at("if ok"), "{text}");
    assert!(at("if ok") < at("fsub"), "{text}");
    assert!(!text.contains("for i"), "{text}");
    // A fast loop that adds into an accumulator would add twice where the guard fails.
    let mut p = guard_then_two_loops(true);
    let before = crate::print::function(&p, FuncId(0));
    assert_eq!(f0_after_version(&mut p), before);
}

/// `acc + arr[k]`, `k` the index `i` checked against `len` at site 1: `z`.
fn add_checked_element(b: &mut Builder, acc: Var, arr: Var, i: Var, len: Var) -> Var {
    let k = b.let1(
        Ty::I64,
        "k",
        Op::Rt(
            Rt::IndexI64,
            vec![Operand::I64(1), Operand::Var(i), Operand::Var(len)],
        ),
    );
    let y = load(b, Ty::F64, "y", arr, Operand::Var(k));
    b.let1(
        Ty::F64,
        "z",
        Op::Binary(BinOp::FAdd, Operand::Var(acc), Operand::Var(y)),
    )
}

/// `f0(a0, c: bool, n)`: `var m; if c { m := length a0 } else { m := 0 }`, then a loop over `n`
/// summing `a0[check(i, m)]`; with `in_loop`, the loop also assigns `m` after its read.
fn checked_loop_on_an_assigned_length(in_loop: bool) -> Program {
    let mut b = Builder::new();
    let (a0, c, n) = array_flag_count(&mut b);
    let m = b.var(Ty::I64, "m");
    b.push(Stmt::Declare(vec![m]));
    b.open();
    let len = b.let1(Ty::I64, "len", Op::Length(Operand::Var(a0)));
    b.push(Stmt::Set(m, Operand::Var(len)));
    let then = b.close();
    b.open();
    b.push(Stmt::Set(m, Operand::I64(0)));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(c),
        then,
        els,
    });
    let acc = b.var(Ty::F64, "acc");
    b.push(Stmt::Declare(vec![acc]));
    b.push(Stmt::Set(acc, Operand::F64(0.0)));
    let i = b.var(Ty::I64, "i");
    b.open();
    let t = add_checked_element(&mut b, acc, a0, i, m);
    b.push(Stmt::Set(acc, Operand::Var(t)));
    if in_loop {
        b.push(Stmt::Set(m, Operand::I64(0)));
    }
    let f = loop_returning(b, i, acc, [a0, c, n]);
    Program {
        sites: vec![
            Site {
                prefix: "t.vlad:1:1: error: ".into(),
                excerpt: None,
            };
            2
        ],
        ..program(vec![f])
    }
}

#[test]
fn a_loop_checking_against_a_length_assigned_before_it_runs_in_two_versions() {
    let text = f0_after_version(&mut checked_loop_on_an_assigned_length(false));
    // The length of the first array or 0, set before the loop and not in it: tested once,
    // and the copy for a long enough array has no check.
    assert_eq!(text.matches("for i").count(), 2, "{text}");
    assert_eq!(text.matches("vl_index_i").count(), 1, "{text}");
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(at("= ilt m") < at("for i"), "{text}");
    // A loop that assigns the length checks it in every step, in one version.
    let text = f0_after_version(&mut checked_loop_on_an_assigned_length(true));
    assert_eq!(text.matches("for i").count(), 1, "{text}");
    assert_eq!(text.matches("vl_index_i").count(), 1, "{text}");
    assert!(!text.contains("short"), "{text}");
}

/// `f0(a: array(f64), m: i64) -> f64`: the sum of `a` read from its end, `get a (n - 1 - i)`
/// for the counter `i` of a loop of `m` steps (`m` the length of `a` if `m_is_n`), as a
/// reverse sweep reads its tape.
fn sum_from_the_end(m_is_n: bool) -> Program {
    let mut b = Builder::new();
    let a = b.named_var(Ty::Array(layout(&[Ty::F64])), "a".into());
    let m = b.named_var(Ty::I64, "m".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let count = if m_is_n { n } else { m };
    let nr = b.let1(Ty::F64, "nr", Op::Unary(UnOp::I64ToF64, Operand::Var(n)));
    fold_from_the_end(&mut b, a, nr, n, count);
    with_sites(b.finish(spec(0), vec![a, m], layout(&[Ty::F64])))
}

/// Ends `b` with a fold of `count` steps summing `get a ((c - 1) - i)` for its counter `i`
/// (`c` a real, the index checked against the length `n`), and its return.
fn fold_from_the_end(b: &mut Builder, a: Var, c: Var, n: Var, count: Var) {
    let last = b.let1(
        Ty::F64,
        "last",
        Op::Binary(BinOp::FSub, Operand::Var(c), Operand::F64(1.0)),
    );
    let acc = b.var(Ty::F64, "acc");
    let i = b.var(Ty::I64, "i");
    b.open();
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    let j = b.let1(
        Ty::F64,
        "j",
        Op::Binary(BinOp::FSub, Operand::Var(last), Operand::Var(r)),
    );
    let k = b.let1(
        Ty::I64,
        "k",
        Op::Rt(
            Rt::Index,
            vec![Operand::I64(1), Operand::Var(j), Operand::Var(n)],
        ),
    );
    let x = load(b, Ty::F64, "x", a, Operand::Var(k));
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(acc), Operand::Var(x)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![acc],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(count),
        index: i,
        body,
        next: vec![Operand::Var(t)],
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
}

#[test]
fn an_index_counted_from_the_end_of_the_loop_is_in_range() {
    // `(n - 1) - i` for a counter below n is a natural number below n: no check, an integer.
    let mut p = sum_from_the_end(true);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("vl_index"), "{text}");
    assert!(text.contains("isub"), "{text}");
    // A loop of m steps may run past the array: the index is checked.
    let mut p = sum_from_the_end(false);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("rt vl_index("), "{text}");
    // The same in integers (what a later round sees): no check.
    let mut p = sum_from_the_end(true);
    let f = p.func_mut(FuncId(0));
    let int = |x: &Operand| match x {
        Operand::F64(c) => Operand::I64(*c as i64),
        x => x.clone(),
    };
    walk_mut(&mut f.body, &mut |s| match s {
        Stmt::Let(_, op @ Op::Binary(BinOp::FSub, ..)) => {
            if let Op::Binary(_, a, b) = &*op {
                *op = Op::Binary(BinOp::ISub, int(a), int(b));
            }
        }
        Stmt::Let(_, op @ Op::Unary(UnOp::I64ToF64, _)) => {
            if let Op::Unary(_, x) = &*op {
                *op = Op::Copy(x.clone());
            }
        }
        Stmt::Let(_, Op::Rt(rt @ Rt::Index, _)) => *rt = Rt::IndexI64,
        _ => {}
    });
    for v in &mut f.vars {
        if ["nr", "last", "r", "j"]
            .iter()
            .any(|p| v.name.starts_with(p))
        {
            v.ty = Ty::I64;
        }
    }
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("vl_index"), "{text}");
}

#[test]
fn an_index_from_the_end_of_a_count_checked_in_a_record_is_an_integer() {
    // f0(a, c): vl_check_count(c); for i < f64toi64 c: get a ((c - 1) - i) -- the inner sweep
    // of a nested loop, whose count its tape's record holds as a real.
    let mut b = Builder::new();
    let a = b.named_var(Ty::Array(layout(&[Ty::F64])), "a".into());
    let c = b.named_var(Ty::F64, "c".into());
    b.effect(Op::Rt(
        Rt::CheckCount,
        vec![
            Operand::I64(1),
            Operand::Str("ifold".into()),
            Operand::Str("count".into()),
            Operand::Var(c),
        ],
    ));
    let m = b.let1(Ty::I64, "m", Op::Unary(UnOp::F64ToI64, Operand::Var(c)));
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    fold_from_the_end(&mut b, a, c, n, m);
    let mut p = with_sites(b.finish(spec(0), vec![a, c], layout(&[Ty::F64])));
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The record's count need not be the array's length: checked, but as an integer.
    assert!(!text.contains("rt vl_index("), "{text}");
    assert!(text.contains("rt vl_index_i("), "{text}");
    assert!(text.contains("vl_check_count"), "{text}");
}

/// `f0(a: array(f64), b: array(f64), n: i64) -> (f64, ..)`: a tape of n records
/// `(3i, a)` (`(3i, b)` at odd `i` if `two_arrays`), and a sweep over it that reads each record's
/// array's length; `escapes`: the tape is returned too.
fn tape_holding_an_array(two_arrays: bool, escapes: bool) -> Program {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let rec = layout(&[Ty::F64, arr.clone()]);
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a".into());
    let a2 = b.named_var(arr.clone(), "b".into());
    let n = b.named_var(Ty::I64, "n".into());
    let tape = b.let1(
        Ty::Array(rec.clone()),
        "tape",
        Op::NewArray {
            layout: rec.clone(),
            count: Operand::Var(n),
        },
    );
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
    // Not the index itself (which `own_index` would take out too).
    let x = b.let1(
        Ty::F64,
        "x",
        Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(3.0)),
    );
    b.push(Stmt::Store {
        array: Operand::Var(tape),
        index: Operand::Var(i),
        slot: 0,
        value: Operand::Var(x),
    });
    let store_array = |from: Var| Stmt::Store {
        array: Operand::Var(tape),
        index: Operand::Var(i),
        slot: 1,
        value: Operand::Var(from),
    };
    if two_arrays {
        let two = b.let1(
            Ty::I64,
            "two",
            Op::Binary(BinOp::IMul, Operand::Var(i), Operand::I64(2)),
        );
        let even = b.let1(
            Ty::Bool,
            "even",
            Op::Binary(BinOp::IEq, Operand::Var(two), Operand::Var(i)),
        );
        b.push(Stmt::If {
            cond: Operand::Var(even),
            then: vec![store_array(a)],
            els: vec![store_array(a2)],
        });
    } else {
        b.push(store_array(a));
    }
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body,
    });
    let acc = b.var(Ty::F64, "acc");
    let j = b.var(Ty::I64, "j");
    b.open();
    let x = b.let1(
        Ty::F64,
        "y",
        Op::Load {
            array: Operand::Var(tape),
            index: Operand::Var(j),
            slot: 0,
        },
    );
    let held = b.let1(
        arr.clone(),
        "held",
        Op::Load {
            array: Operand::Var(tape),
            index: Operand::Var(j),
            slot: 1,
        },
    );
    let len = b.let1(Ty::I64, "len", Op::Length(Operand::Var(held)));
    let lr = b.let1(Ty::F64, "lr", Op::Unary(UnOp::I64ToF64, Operand::Var(len)));
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(acc), Operand::Var(x)),
    );
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(lr)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![acc],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: j,
        body,
        next: vec![Operand::Var(t)],
    });
    let (ret, results) = if escapes {
        (
            vec![Operand::Var(acc), Operand::Var(tape)],
            layout(&[Ty::F64, Ty::Array(rec)]),
        )
    } else {
        (vec![Operand::Var(acc)], layout(&[Ty::F64]))
    };
    b.push(Stmt::Return(ret));
    program(vec![b.finish(spec(0), vec![a, a2, n], results)])
}

#[test]
fn a_slot_every_record_of_a_tape_holds_one_array_in_is_read_as_that_array() {
    let mut p = tape_holding_an_array(false, false);
    verify(&p).unwrap();
    passes::fields::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The sweep measures `a` itself, and the records hold only the index.
    assert!(text.contains("= length a\n"), "{text}");
    assert!(text.contains("new array(f64) count n"), "{text}");
    assert_eq!(text.matches("store").count(), 1, "{text}");
    // Records holding one of two arrays, or a tape the caller sees, keep the slot.
    for (two, escapes) in [(true, false), (false, true)] {
        let mut p = tape_holding_an_array(two, escapes);
        verify(&p).unwrap();
        passes::fields::run(&mut p);
        verify(&p).unwrap();
        let text = crate::print::function(&p, FuncId(0));
        assert!(text.contains("new array(f64, array(f64))"), "{text}");
        assert!(text.contains("= length held"), "{text}");
    }
}

#[test]
fn a_step_that_adds_into_its_accumulator_in_place_is_inlined() {
    // f1(acc, i) stores acc[i] + 1 into acc[i] and returns acc; f0's loop over a's indices
    // calls it with a as the accumulator.
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let acc = b.named_var(arr.clone(), "acc".into());
    let i = b.named_var(Ty::I64, "i".into());
    add_one_in_place(&mut b, acc, i);
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    let step = b.finish(spec(1), vec![acc, i], layout(std::slice::from_ref(&arr)));
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let acc = b.var(arr.clone(), "acc");
    let i = b.var(Ty::I64, "i");
    b.open();
    let next = b.let1(
        arr.clone(),
        "next",
        Op::Call {
            func: FuncId(1),
            args: vec![Operand::Var(acc), Operand::Var(i)],
            guard: None,
        },
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![acc],
        init: vec![Operand::Var(a)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(next)],
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    let main = b.finish(spec(0), vec![a], layout(&[arr]));
    let mut p = program(vec![main, step]);
    verify(&p).unwrap();
    passes::inline::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("call f1"), "{text}");
    assert!(text.contains("store acc"), "{text}");
}

#[test]
fn a_checked_count_is_read_as_its_integer_only_where_the_integer_is_visible() {
    // f0(c, flag): vl_check_count(c); if flag { m = f64toi64 c; return m converted };
    // f64toi64 (c - 1) converted: after the `if`, m is out of scope, and `c - 1` must not be
    // computed from it.
    let mut b = Builder::new();
    let c = b.named_var(Ty::F64, "c".into());
    let flag = b.named_var(Ty::Bool, "flag".into());
    b.effect(Op::Rt(
        Rt::CheckCount,
        vec![
            Operand::I64(1),
            Operand::Str("build".into()),
            Operand::Str("length".into()),
            Operand::Var(c),
        ],
    ));
    b.open();
    let m = b.let1(Ty::I64, "m", Op::Unary(UnOp::F64ToI64, Operand::Var(c)));
    let mr = b.let1(Ty::F64, "mr", Op::Unary(UnOp::I64ToF64, Operand::Var(m)));
    b.push(Stmt::Return(vec![Operand::Var(mr)]));
    let then = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(flag),
        then,
        els: vec![],
    });
    let j = b.let1(
        Ty::F64,
        "j",
        Op::Binary(BinOp::FSub, Operand::Var(c), Operand::F64(1.0)),
    );
    // An integer conversion of `c - 1`, which reads the integer of `c` where it has one.
    let k = b.let1(Ty::I64, "k", Op::Unary(UnOp::F64ToI64, Operand::Var(j)));
    let kr = b.let1(Ty::F64, "kr", Op::Unary(UnOp::I64ToF64, Operand::Var(k)));
    b.push(Stmt::Return(vec![Operand::Var(kr)]));
    let mut p = with_sites(b.finish(spec(0), vec![c, flag], layout(&[Ty::F64])));
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(text.contains("fsub c"), "{text}");
}

/// f0(n) makes two tapes of records (f64, f64), n each: the first's slot 0 holds each record's
/// index, the second's the constant 0 (forward-over-reverse code's tangent half of a tape);
/// slot 1 a product. f1 sums both slots of the tape it is given; the first tape goes to f1,
/// the second to f2 (a copy of f1), or to f1 too (`mixed`).
fn two_tapes_read_apart(mixed: bool) -> Program {
    let rec = layout(&[Ty::F64, Ty::F64]);
    let tape_ty = Ty::Array(rec.clone());
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let tape = |b: &mut Builder, index_slot: bool| {
        let t = b.let1(
            tape_ty.clone(),
            "tape",
            Op::NewArray {
                layout: rec.clone(),
                count: Operand::Var(n),
            },
        );
        let i = b.var(Ty::I64, "i");
        b.open();
        let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::I64ToF64, Operand::Var(i)));
        let y = b.let1(
            Ty::F64,
            "y",
            Op::Binary(BinOp::FMul, Operand::Var(x), Operand::F64(3.0)),
        );
        let first = if index_slot {
            Operand::Var(x)
        } else {
            Operand::F64(0.0)
        };
        for (slot, value) in [(0, first), (1, Operand::Var(y))] {
            b.push(Stmt::Store {
                array: Operand::Var(t),
                index: Operand::Var(i),
                slot,
                value,
            });
        }
        let body = b.close();
        b.push(Stmt::For {
            index: i,
            count: Operand::Var(n),
            body,
        });
        t
    };
    let t1 = tape(&mut b, true);
    let t2 = tape(&mut b, false);
    let call = |b: &mut Builder, func: u32, t: Var| {
        b.let1(
            Ty::F64,
            "r",
            Op::Call {
                func: FuncId(func),
                args: vec![Operand::Var(t)],
                guard: None,
            },
        )
    };
    let r1 = call(&mut b, 1, t1);
    let r2 = call(&mut b, if mixed { 1 } else { 2 }, t2);
    let s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(r1), Operand::Var(r2)),
    );
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    let main = b.finish(spec(0), vec![n], layout(&[Ty::F64]));
    let sum = |key: usize| {
        let mut b = Builder::new();
        let t = b.named_var(tape_ty.clone(), "t".into());
        let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(t)));
        let acc = b.var(Ty::F64, "acc");
        let j = b.var(Ty::I64, "j");
        b.open();
        let mut next = Operand::Var(acc);
        for slot in [0, 1] {
            let x = b.let1(
                Ty::F64,
                "x",
                Op::Load {
                    array: Operand::Var(t),
                    index: Operand::Var(j),
                    slot,
                },
            );
            next =
                Operand::Var(b.let1(Ty::F64, "s", Op::Binary(BinOp::FAdd, next, Operand::Var(x))));
        }
        let body = b.close();
        b.push(Stmt::Ifold {
            accs: vec![acc],
            init: vec![Operand::F64(0.0)],
            count: Operand::Var(m),
            index: j,
            body,
            next: vec![next],
        });
        b.push(Stmt::Return(vec![Operand::Var(acc)]));
        b.finish(spec(key), vec![t], layout(&[Ty::F64]))
    };
    program(vec![main, sum(1), sum(2)])
}

#[test]
fn a_slot_read_as_the_index_or_a_constant_by_where_the_tape_was_made() {
    let mut p = two_tapes_read_apart(false);
    verify(&p).unwrap();
    passes::fields::run(&mut p);
    verify(&p).unwrap();
    let main = crate::print::function(&p, FuncId(0));
    let f1 = crate::print::function(&p, FuncId(1));
    let f2 = crate::print::function(&p, FuncId(2));
    // By layout the slot is neither the index nor a constant; by site it is each, so no load
    // reads it and the records lose it.
    assert_eq!(main.matches("new array(f64) count n").count(), 2, "{main}");
    assert_eq!(main.matches("store").count(), 2, "{main}");
    assert!(f1.contains("i64tof64 j"), "{f1}");
    assert_eq!(f1.matches("load").count(), 1, "{f1}");
    assert!(
        f2.lines()
            .any(|l| l.contains("fadd") && l.ends_with(", 0.0")),
        "{f2}"
    );
    assert_eq!(f2.matches("load").count(), 1, "{f2}");
    // A sum given either tape reads the slot.
    let mut p = two_tapes_read_apart(true);
    verify(&p).unwrap();
    passes::fields::run(&mut p);
    verify(&p).unwrap();
    let main = crate::print::function(&p, FuncId(0));
    let f1 = crate::print::function(&p, FuncId(1));
    assert_eq!(
        main.matches("new array(f64, f64) count n").count(),
        2,
        "{main}"
    );
    assert_eq!(f1.matches("load").count(), 2, "{f1}");
}

/// f1() makes an array `made` and returns it; f0 calls f1 twice (`a`, `b`), stores a in a
/// record of `holder`, loads it back and passes the loaded array to f2(x). The analysis follows
/// the array through the result, the record's slot and the call: x comes from f1's site only,
/// and the record's slot holds nothing else.
#[test]
fn provenance_follows_arrays_through_results_slots_and_calls() {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let rec = layout(std::slice::from_ref(&arr));
    let mut b = Builder::new();
    let made = b.let1(
        arr.clone(),
        "made",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::I64(3),
        },
    );
    b.push(Stmt::Return(vec![Operand::Var(made)]));
    let f1 = b.finish(spec(1), vec![], layout(std::slice::from_ref(&arr)));
    let mut b = Builder::new();
    let x = b.named_var(arr.clone(), "x".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let r = b.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(n)));
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    let f2 = b.finish(spec(2), vec![x], layout(&[Ty::F64]));
    let mut b = Builder::new();
    let call = |b: &mut Builder, prefix: &str| {
        b.let1(
            arr.clone(),
            prefix,
            Op::Call {
                func: FuncId(1),
                args: vec![],
                guard: None,
            },
        )
    };
    let a = call(&mut b, "a");
    let _b = call(&mut b, "b");
    let holder = b.let1(
        Ty::Array(rec.clone()),
        "holder",
        Op::NewArray {
            layout: rec.clone(),
            count: Operand::I64(1),
        },
    );
    b.push(Stmt::Store {
        array: Operand::Var(holder),
        index: Operand::I64(0),
        slot: 0,
        value: Operand::Var(a),
    });
    let back = b.let1(
        arr.clone(),
        "back",
        Op::Load {
            array: Operand::Var(holder),
            index: Operand::I64(0),
            slot: 0,
        },
    );
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Call {
            func: FuncId(2),
            args: vec![Operand::Var(back)],
            guard: None,
        },
    );
    b.push(Stmt::Return(vec![Operand::Var(y)]));
    let f0 = b.finish(spec(0), vec![], layout(&[Ty::F64]));
    let p = program(vec![f0, f1, f2]);
    verify(&p).unwrap();
    let pr = passes::provenance::analyse(&p, &Default::default()).expect("it settles");
    let site = pr.site_of[&(1, made)];
    let of = |func: usize, v: Var| pr.origin(func, &p.funcs[func], &Operand::Var(v));
    let only = Some(std::collections::BTreeSet::from([site]));
    assert_eq!(of(0, a), only);
    assert_eq!(of(0, back), only);
    assert_eq!(of(2, x), only);
    assert_eq!(of(0, holder), Some([pr.site_of[&(0, holder)]].into()));
    // With the record's layout seen by the runtime, what is loaded from it comes from anywhere.
    let escaped = [rec, layout(&[Ty::F64])].into_iter().collect();
    let pr = passes::provenance::analyse(&p, &escaped).expect("it settles");
    assert_eq!(pr.origin(2, &p.funcs[2], &Operand::Var(x)), None);
}

/// How `overwrite_case` differs from the case that overwrites.
#[derive(Clone, Copy, PartialEq)]
enum Overwrite {
    Yes,
    /// `x` is read after the build.
    ReadAfter,
    /// `x` is stored into another array before the build.
    StoredBefore,
    /// The build reads `x` at index 0 too.
    OtherIndex,
    /// The array is the parameter, not one the function made.
    Parameter,
}

/// `f(a: array(f64), n: i64)`: `x = new array(f64) count n` filled with 1.0 (or `x = a`), `k =
/// length x`, `y = build k (i) { load x[i] + load a[i] }`, returns `y[0]`, with `how`'s change.
fn overwrite_case(how: Overwrite) -> Program {
    let reals = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(reals.clone(), "a0".into());
    let n = b.named_var(Ty::I64, "a1".into());
    let x = if how == Overwrite::Parameter {
        a
    } else {
        let x = b.let1(
            reals.clone(),
            "x",
            Op::NewArray {
                layout: layout(&[Ty::F64]),
                count: Operand::Var(n),
            },
        );
        let i = b.var(Ty::I64, "i");
        b.open();
        b.push(Stmt::Store {
            array: Operand::Var(x),
            index: Operand::Var(i),
            slot: 0,
            value: Operand::F64(1.0),
        });
        let body = b.close();
        b.push(Stmt::For {
            index: i,
            count: Operand::Var(n),
            body,
        });
        x
    };
    if how == Overwrite::StoredBefore {
        let z = b.let1(
            Ty::Array(layout(std::slice::from_ref(&reals))),
            "z",
            Op::NewArray {
                layout: layout(std::slice::from_ref(&reals)),
                count: Operand::I64(1),
            },
        );
        b.push(Stmt::Store {
            array: Operand::Var(z),
            index: Operand::I64(0),
            slot: 0,
            value: Operand::Var(x),
        });
    }
    let k = b.let1(Ty::I64, "k", Op::Length(Operand::Var(x)));
    let y = b.var(reals.clone(), "y");
    let i = b.var(Ty::I64, "i");
    b.open();
    let t = load(&mut b, Ty::F64, "t", x, Operand::Var(i));
    let u = load(&mut b, Ty::F64, "u", a, Operand::Var(i));
    let mut s = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(t), Operand::Var(u)),
    );
    if how == Overwrite::OtherIndex {
        let w = load(&mut b, Ty::F64, "w", x, Operand::I64(0));
        s = b.let1(
            Ty::F64,
            "s",
            Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(w)),
        );
    }
    let body = b.close();
    b.push(Stmt::Build {
        array: y,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(k),
        index: i,
        body,
        elem: vec![Operand::Var(s)],
    });
    let mut r = load(&mut b, Ty::F64, "r", y, Operand::I64(0));
    if how == Overwrite::ReadAfter {
        let w = load(&mut b, Ty::F64, "w", x, Operand::I64(0));
        r = b.let1(
            Ty::F64,
            "r",
            Op::Binary(BinOp::FAdd, Operand::Var(r), Operand::Var(w)),
        );
    }
    b.push(Stmt::Return(vec![Operand::Var(r)]));
    program(vec![b.finish(spec(0), vec![a, n], layout(&[Ty::F64]))])
}

#[test]
fn a_build_overwrites_an_array_it_reads_at_its_index_that_no_one_reads_after_it() {
    let mut p = overwrite_case(Overwrite::Yes);
    verify(&p).unwrap();
    passes::overwrite::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    assert!(!text.contains("build"), "{text}");
    assert_eq!(text.matches("new array").count(), 1, "{text}");
    assert!(text.contains("store x2[i"), "{text}");
    assert!(text.contains("y5: array(f64) = x2"), "{text}");
    for how in [
        Overwrite::ReadAfter,
        Overwrite::StoredBefore,
        Overwrite::OtherIndex,
        Overwrite::Parameter,
    ] {
        let mut p = overwrite_case(how);
        verify(&p).unwrap();
        let before = p.clone();
        passes::overwrite::run(&mut p);
        assert_eq!(p, before, "{}", crate::print::function(&p, FuncId(0)));
    }
}

/// `b = new array(f64) count n` then `for i < n { x = load a[i]; [extra]; store b[i] = x }`,
/// with `a` a parameter: the fresh arrays before the loop (`update_fresh`) and whether its
/// iterations are independent. `before` may mention `b` after it is made; `extra` adds to the
/// body (given a, b, i, x).
fn fill_loop(
    before: impl Fn(&mut Builder, Var),
    extra: impl Fn(&mut Builder, Var, Var, Var, Var),
    store_at_next: bool,
) -> bool {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let a = b.named_var(arr.clone(), "a".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
    let out = b.let1(
        arr,
        "b",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::Var(n),
        },
    );
    before(&mut b, out);
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = load(&mut b, Ty::F64, "x", a, Operand::Var(i));
    extra(&mut b, a, out, i, x);
    let at = if store_at_next {
        Operand::Var(b.let1(
            Ty::I64,
            "j",
            Op::Binary(BinOp::IAdd, Operand::Var(i), Operand::I64(1)),
        ))
    } else {
        Operand::Var(i)
    };
    b.push(Stmt::Store {
        array: Operand::Var(out),
        index: at,
        slot: 0,
        value: Operand::Var(x),
    });
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body,
    });
    b.push(Stmt::Return(vec![]));
    let f = b.finish(spec(0), vec![a], layout(&[]));
    let at = f
        .body
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .unwrap();
    let mut fresh = Vec::new();
    for s in &f.body[..at] {
        passes::loops::update_fresh(&mut fresh, s);
    }
    let Stmt::For { index, body, .. } = &f.body[at] else {
        unreachable!()
    };
    passes::loops::iterations_independent(&fresh, *index, body)
}

#[test]
fn a_loop_that_fills_a_new_array_at_its_index_has_independent_iterations() {
    assert!(fill_loop(|_, _| {}, |_, _, _, _, _| {}, false));
    // An index check and the length of the new array change nothing.
    assert!(fill_loop(
        |_, _| {},
        |b, _, out, i, _| {
            let n = b.let1(Ty::I64, "m", Op::Length(Operand::Var(out)));
            b.let1(
                Ty::I64,
                "k",
                Op::Rt(
                    Rt::IndexI64,
                    vec![Operand::I64(1), Operand::Var(i), Operand::Var(n)],
                ),
            );
        },
        false
    ));
}

#[test]
fn loops_that_may_touch_one_element_twice_are_not_independent() {
    // Stored at another index than the loop's.
    assert!(!fill_loop(|_, _| {}, |_, _, _, _, _| {}, true));
    // The new array read in the loop.
    assert!(!fill_loop(
        |_, _| {},
        |b, _, out, i, _| {
            load(b, Ty::F64, "y", out, Operand::Var(i));
        },
        false
    ));
    // A copy of it made before the loop: the copy may be read under another name.
    assert!(!fill_loop(
        |b, out| {
            b.let1(
                Ty::Array(layout(&[Ty::F64])),
                "c",
                Op::Copy(Operand::Var(out)),
            );
        },
        |_, _, _, _, _| {},
        false
    ));
    // A store into the parameter too.
    assert!(!fill_loop(
        |_, _| {},
        |b, a, _, i, x| {
            b.push(Stmt::Store {
                array: Operand::Var(a),
                index: Operand::Var(i),
                slot: 0,
                value: Operand::Var(x),
            });
        },
        false
    ));
    // A call, which may do anything.
    assert!(!fill_loop(
        |_, _| {},
        |b, _, _, _, _| {
            b.push(Stmt::Let(
                vec![],
                Op::Call {
                    func: FuncId(0),
                    args: vec![],
                    guard: None,
                },
            ));
        },
        false
    ));
}

/// How `nested_tapes` differs from the case whose inner records' array slot is read as `w`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Nested {
    Invariant,
    /// The inner tape is also passed to a function (f1): its arrays leave the call.
    PassedOut,
    /// The records store an array made in the outer loop, a new one for each point.
    MadeInLoop,
    /// One more store writes another top-level array into the slot.
    TwoValues,
}

/// `f0(n: i64)`: `w = new array(f64) count n` at the top; `outer = new array(array(array(f64),
/// f64)) count n`; for each i an inner tape `inner = new array(array(f64), f64) count n` whose
/// records j hold `w` (slot 0) and `sin j` (slot 1), stored at `outer[i].0`; then a loop reads
/// `t = outer[k].0`, `a = t[k].0`, `y = t[k].1` and sums `a[k]` and `y`.
fn nested_tapes(how: Nested) -> Program {
    let reals = Ty::Array(layout(&[Ty::F64]));
    let rec = layout(&[reals.clone(), Ty::F64]);
    let inner_ty = Ty::Array(rec.clone());
    let outer_rec = layout(std::slice::from_ref(&inner_ty));
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let new_reals = |b: &mut Builder, name: &str| {
        b.let1(
            reals.clone(),
            name,
            Op::NewArray {
                layout: layout(&[Ty::F64]),
                count: Operand::Var(n),
            },
        )
    };
    let w = new_reals(&mut b, "w");
    let other = new_reals(&mut b, "other");
    let outer = b.let1(
        Ty::Array(outer_rec.clone()),
        "outer",
        Op::NewArray {
            layout: outer_rec.clone(),
            count: Operand::Var(n),
        },
    );
    let i = b.var(Ty::I64, "i");
    b.open();
    let held = if how == Nested::MadeInLoop {
        new_reals(&mut b, "fresh")
    } else {
        w
    };
    let inner = b.let1(
        inner_ty.clone(),
        "inner",
        Op::NewArray {
            layout: rec.clone(),
            count: Operand::Var(n),
        },
    );
    let j = b.var(Ty::I64, "j");
    b.open();
    let jr = b.let1(Ty::F64, "jr", Op::Unary(UnOp::I64ToF64, Operand::Var(j)));
    let x = b.let1(Ty::F64, "x", Op::Unary(UnOp::Sin, Operand::Var(jr)));
    let store = |b: &mut Builder, slot: u32, value: Var| {
        b.push(Stmt::Store {
            array: Operand::Var(inner),
            index: Operand::Var(j),
            slot,
            value: Operand::Var(value),
        })
    };
    store(&mut b, 0, held);
    store(&mut b, 1, x);
    let body = b.close();
    b.push(Stmt::For {
        index: j,
        count: Operand::Var(n),
        body,
    });
    if how == Nested::TwoValues {
        b.push(Stmt::Store {
            array: Operand::Var(inner),
            index: Operand::I64(0),
            slot: 0,
            value: Operand::Var(other),
        });
    }
    if how == Nested::PassedOut {
        b.let1(
            Ty::F64,
            "out",
            Op::Call {
                func: FuncId(1),
                args: vec![Operand::Var(inner)],
                guard: None,
            },
        );
    }
    b.push(Stmt::Store {
        array: Operand::Var(outer),
        index: Operand::Var(i),
        slot: 0,
        value: Operand::Var(inner),
    });
    let body = b.close();
    b.push(Stmt::For {
        index: i,
        count: Operand::Var(n),
        body,
    });
    let sum = b.var(Ty::F64, "sum");
    let k = b.var(Ty::I64, "k");
    b.open();
    let t = load(&mut b, inner_ty.clone(), "t", outer, Operand::Var(k));
    let a = load(&mut b, reals.clone(), "a", t, Operand::Var(k));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Load {
            array: Operand::Var(t),
            index: Operand::Var(k),
            slot: 1,
        },
    );
    let lr = load(&mut b, Ty::F64, "ak", a, Operand::Var(k));
    let s1 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(sum), Operand::Var(lr)),
    );
    let s2 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s1), Operand::Var(y)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![sum],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: k,
        body,
        next: vec![Operand::Var(s2)],
    });
    b.push(Stmt::Return(vec![Operand::Var(sum)]));
    let f0 = b.finish(spec(0), vec![n], layout(&[Ty::F64]));
    // f1(t): the length of t, as a real.
    let mut c = Builder::new();
    let t = c.named_var(inner_ty, "t".into());
    let m = c.let1(Ty::I64, "m", Op::Length(Operand::Var(t)));
    let r = c.let1(Ty::F64, "r", Op::Unary(UnOp::I64ToF64, Operand::Var(m)));
    c.push(Stmt::Return(vec![Operand::Var(r)]));
    let f1 = c.finish(spec(1), vec![t], layout(&[Ty::F64]));
    let mut p = program(vec![f0, f1]);
    p.main = Some(FuncId(0));
    p
}

/// The records of a tape held by another tape's records all hold the array `w` made at the
/// top of their function: the sweep's load of that slot reads `w`, and the records lose the
/// slot (one real each, no pointer). Not when the tape leaves the call (passed to f1), when
/// the array is made anew for each tape, or when one write stores another array.
#[test]
fn a_slot_that_every_record_of_nested_tapes_fills_with_one_array_is_read_as_it() {
    for how in [
        Nested::Invariant,
        Nested::PassedOut,
        Nested::MadeInLoop,
        Nested::TwoValues,
    ] {
        let mut p = nested_tapes(how);
        verify(&p).unwrap();
        passes::fields::run(&mut p);
        verify(&p).unwrap();
        let main = crate::print::function(&p, FuncId(0));
        if how == Nested::Invariant {
            assert!(main.contains("new array(f64) count n"), "{main}");
            assert!(!main.contains("array(array(f64), f64)"), "{main}");
            assert!(main.contains("= load w"), "{main}");
            assert_eq!(main.matches("store inner").count(), 1, "{main}");
        } else {
            assert!(
                main.contains("new array(array(f64), f64) count n"),
                "{how:?}: {main}"
            );
            assert!(!main.contains("= load w"), "{how:?}: {main}");
        }
    }
}

/// `f(tape: array(f64)) -> array(f64)`: a reverse sweep over `tape` (record `n - 1 - i` at step
/// i, its index checked against `n = length tape`) whose accumulator `acc` starts as null with
/// a flag `first` (`#t`, set to `#f` by every step, or to `x > 0` if not `known`): the step
/// branches on the flag, making a new array on the first step (marked the loop's own if
/// `marked`) and, on the others, adding into `acc` if it is the loop's own (`vl_acc_owned`),
/// else into a copy marked its own.
fn first_step_sweep(known: bool, marked: bool) -> Program {
    let reals = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let tape = b.named_var(reals.clone(), "tape".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(tape)));
    let last = b.let1(
        Ty::I64,
        "last",
        Op::Binary(BinOp::ISub, Operand::Var(n), Operand::I64(1)),
    );
    let first = b.var(Ty::Bool, "first");
    let acc = b.var(reals.clone(), "acc");
    let i = b.var(Ty::I64, "i");
    b.open();
    let k = b.let1(
        Ty::I64,
        "k",
        Op::Binary(BinOp::ISub, Operand::Var(last), Operand::Var(i)),
    );
    let ki = b.let1(
        Ty::I64,
        "ki",
        Op::Rt(
            Rt::IndexI64,
            vec![Operand::I64(0), Operand::Var(k), Operand::Var(n)],
        ),
    );
    let x = load(&mut b, Ty::F64, "x", tape, Operand::Var(ki));
    let a = b.var(reals.clone(), "a");
    b.push(Stmt::Declare(vec![a]));
    b.open();
    let made = b.let1(
        reals.clone(),
        "made",
        Op::NewArray {
            layout: layout(&[Ty::F64]),
            count: Operand::Var(n),
        },
    );
    b.push(Stmt::Store {
        array: Operand::Var(made),
        index: Operand::Var(ki),
        slot: 0,
        value: Operand::Var(x),
    });
    let made = if marked {
        b.let1(
            reals.clone(),
            "marked",
            Op::Rt(Rt::AccMark, vec![Operand::Var(made)]),
        )
    } else {
        made
    };
    b.push(Stmt::Set(a, Operand::Var(made)));
    let then = b.close();
    b.open();
    // `%accumulate`: into `acc` if it is the loop's own, else into a copy marked its own.
    let own = b.var(reals.clone(), "own");
    b.push(Stmt::Declare(vec![own]));
    let owned = b.let1(
        Ty::Bool,
        "owned",
        Op::Rt(Rt::AccOwned, vec![Operand::Var(acc)]),
    );
    b.open();
    b.push(Stmt::Set(own, Operand::Var(acc)));
    let yes = b.close();
    b.open();
    let copy = b.var(reals.clone(), "copy");
    let j = b.var(Ty::I64, "j");
    b.open();
    let e = load(&mut b, Ty::F64, "e", acc, Operand::Var(j));
    let body = b.close();
    b.push(Stmt::Build {
        array: copy,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: j,
        body,
        elem: vec![Operand::Var(e)],
    });
    let mine = b.let1(
        reals.clone(),
        "mine",
        Op::Rt(Rt::AccMark, vec![Operand::Var(copy)]),
    );
    b.push(Stmt::Set(own, Operand::Var(mine)));
    let no = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(owned),
        then: yes,
        els: no,
    });
    let old = load(&mut b, Ty::F64, "old", own, Operand::Var(ki));
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FAdd, Operand::Var(old), Operand::Var(x)),
    );
    b.push(Stmt::Store {
        array: Operand::Var(own),
        index: Operand::Var(ki),
        slot: 0,
        value: Operand::Var(y),
    });
    b.push(Stmt::Set(a, Operand::Var(own)));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(first),
        then,
        els,
    });
    let next_flag = if known {
        Operand::Bool(false)
    } else {
        Operand::Var(b.let1(
            Ty::Bool,
            "pos",
            Op::Binary(BinOp::FGt, Operand::Var(x), Operand::F64(0.0)),
        ))
    };
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![first, acc],
        init: vec![Operand::Bool(true), Operand::Null],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![next_flag, Operand::Var(a)],
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    let f0 = b.finish(spec(0), vec![tape], layout(std::slice::from_ref(&reals)));
    program(vec![f0])
}

/// A sweep whose first step makes its accumulator runs that step before the loop: the loop
/// from index 1 does not test the flag, its accumulator is its own at every step (no test, and
/// no copy: nothing allocated, so `carry` does not collect at its back edge), and its reads of
/// the tape at `n - 1 - (j + 1)` stay unchecked. Where the first step does not mark its array
/// the loop's own, the test and the copy stay (and the collection). A flag that later steps
/// set to a value not known leaves the loop as it was.
#[test]
fn a_sweep_whose_first_step_makes_its_accumulator_runs_that_step_before_the_loop() {
    for marked in [true, false] {
        let mut p = first_step_sweep(true, marked);
        verify(&p).unwrap();
        passes::peel::run(&mut p);
        verify(&p).unwrap();
        passes::carry::run(&mut p);
        verify(&p).unwrap();
        let f = crate::print::function(&p, FuncId(0));
        // The first step, under `0 < n`: the new array, and one index check.
        assert!(f.contains("ilt 0i, n"), "{f}");
        assert_eq!(f.matches("vl_index_i").count(), 1, "{f}");
        assert!(!f.contains("if first"), "{f}");
        let sweep = &f[f.find("ifold").unwrap()..];
        assert!(!sweep.contains("vl_index_i"), "{f}");
        if marked {
            assert_eq!(f.matches("new array").count(), 1, "{f}");
            assert!(!f.contains("vl_acc_owned") && !f.contains("build"), "{f}");
            assert!(!f.contains("collect") && !f.contains("carrying"), "{f}");
        } else {
            assert!(
                sweep.contains("vl_acc_owned") && sweep.contains("build"),
                "{f}"
            );
            assert!(sweep.contains("collect"), "{f}");
        }
    }
    for peeled in [true, false] {
        let mut p = first_step_sweep(peeled, true);
        verify(&p).unwrap();
        passes::peel::run(&mut p);
        verify(&p).unwrap();
        passes::carry::run(&mut p);
        verify(&p).unwrap();
        let f = crate::print::function(&p, FuncId(0));
        if peeled {
            assert!(f.contains("ilt 0i, n") && !f.contains("if first"), "{f}");
        } else {
            assert!(f.contains("if first"), "{f}");
            assert!(f.contains("collect"), "{f}");
            assert!(!f.contains("ilt 0i, n"), "{f}");
        }
    }
}

/// A loop whose accumulator is an array of arrays keeps its first step: a later step could
/// store into the first step's array (then older than the loop's mark) a pointer to an array
/// it made, which the loop's collections would not see.
#[test]
fn a_loop_carrying_arrays_of_arrays_keeps_its_first_step() {
    let rows = Ty::Array(layout(&[Ty::Array(layout(&[Ty::F64]))]));
    let mut b = Builder::new();
    let n = b.named_var(Ty::I64, "n".into());
    let first = b.var(Ty::Bool, "first");
    let acc = b.var(rows.clone(), "acc");
    let i = b.var(Ty::I64, "i");
    b.open();
    let x = b.var(rows.clone(), "x");
    b.push(Stmt::Declare(vec![x]));
    b.open();
    let made = b.let1(
        rows.clone(),
        "made",
        Op::NewArray {
            layout: layout(&[Ty::Array(layout(&[Ty::F64]))]),
            count: Operand::I64(1),
        },
    );
    b.push(Stmt::Set(x, Operand::Var(made)));
    let then = b.close();
    b.open();
    b.push(Stmt::Set(x, Operand::Var(acc)));
    let els = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(first),
        then,
        els,
    });
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![first, acc],
        init: vec![Operand::Bool(true), Operand::Null],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Bool(false), Operand::Var(x)],
    });
    b.push(Stmt::Return(vec![Operand::Var(acc)]));
    let mut p = program(vec![b.finish(spec(0), vec![n], layout(&[rows]))]);
    verify(&p).unwrap();
    passes::peel::run(&mut p);
    verify(&p).unwrap();
    let f = crate::print::function(&p, FuncId(0));
    assert!(f.contains("if first") && !f.contains("ilt 0i, n"), "{f}");
}

/// `f(u, w, n, c) = sum_i x_i` over `x = build n (i -> u[i] + c w[i])`, the step checking its
/// counter against the lengths of `u` and `w` (site 1, then site 2), as the lowering gives
/// `(build n (lambda (i) (+ (get u i) (* c (get w i)))))`; with `offset`, `w` is read at
/// `i + 1` instead (a check of another index, which can fail at a step of its own).
fn build_reading_at_its_counter(offset: bool) -> Function {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let u = b.named_var(arr.clone(), "u".into());
    let w = b.named_var(arr.clone(), "w".into());
    let n = b.named_var(Ty::I64, "n".into());
    let c = b.named_var(Ty::F64, "c".into());
    let lu = b.let1(Ty::I64, "lu", Op::Length(Operand::Var(u)));
    let lw = b.let1(Ty::I64, "lw", Op::Length(Operand::Var(w)));
    let x = b.var(arr.clone(), "x");
    let i = b.var(Ty::I64, "i");
    b.open();
    let check = |b: &mut Builder, site: u32, index: Operand, len: Var| {
        b.push(Stmt::Site(site));
        b.let1(
            Ty::I64,
            "k",
            Op::Rt(
                Rt::IndexI64,
                vec![Operand::I64(i64::from(site)), index, Operand::Var(len)],
            ),
        )
    };
    let k1 = check(&mut b, 1, Operand::Var(i), lu);
    let a = load(&mut b, Ty::F64, "a", u, Operand::Var(k1));
    let at = if offset {
        let j = b.let1(
            Ty::I64,
            "j",
            Op::Binary(BinOp::IAdd, Operand::Var(i), Operand::I64(1)),
        );
        Operand::Var(j)
    } else {
        Operand::Var(i)
    };
    let k2 = check(&mut b, 2, at, lw);
    let d = load(&mut b, Ty::F64, "d", w, Operand::Var(k2));
    let e = b.let1(
        Ty::F64,
        "e",
        Op::Binary(BinOp::FMul, Operand::Var(c), Operand::Var(d)),
    );
    let y = b.let1(
        Ty::F64,
        "y",
        Op::Binary(BinOp::FAdd, Operand::Var(a), Operand::Var(e)),
    );
    let body = b.close();
    b.push(Stmt::Build {
        array: x,
        layout: layout(&[Ty::F64]),
        count: Operand::Var(n),
        index: i,
        body,
        elem: vec![Operand::Var(y)],
    });
    let s = b.var(Ty::F64, "s");
    let j = b.var(Ty::I64, "j");
    b.open();
    let xj = load(&mut b, Ty::F64, "xj", x, Operand::Var(j));
    let t = b.let1(
        Ty::F64,
        "t",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(xj)),
    );
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s],
        init: vec![Operand::F64(0.0)],
        count: Operand::Var(n),
        index: j,
        body,
        next: vec![Operand::Var(t)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s)]));
    b.finish(spec(0), vec![u, w, n, c], layout(&[Ty::F64]))
}

/// A program of one function with `n` call sites.
fn program_with_sites(f: Function, n: usize) -> Program {
    let site = Site {
        prefix: "t.vlad:1:1: error: ".into(),
        excerpt: None,
    };
    let mut p = program(vec![f]);
    p.sites = vec![site; n];
    p
}

#[test]
fn a_build_that_checks_its_counter_checks_the_lengths_once_before_it_and_is_fused() {
    let mut p = program_with_sites(build_reading_at_its_counter(false), 3);
    verify(&p).unwrap();
    passes::scalar_optimise(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // Each check once, before the loop, at its own length (which fails): `u`'s where it is
    // below the count and not above `w`'s, then `w`'s where it is below the count and below
    // `u`'s (a step of both lengths fails at `u`'s check, the first in the step).
    let loop_at = text.find("ifold").expect("the sum's loop");
    assert_eq!(text.matches("vl_index_i").count(), 2, "{text}");
    let first = text.find("vl_index_i(1i, lu").expect("u's check");
    let second = text.find("vl_index_i(2i, lw").expect("w's check");
    assert!(first < second && second < loop_at, "{text}");
    assert!(text.contains("ilt lu") && text.contains("ilt lw"), "{text}");
    // The step no longer checks, so the array is not made: the sum reads `u` and `w`.
    assert!(
        !text.contains("build") && !text.contains("new array"),
        "{text}"
    );
    assert!(
        text.contains("load u[j") && text.contains("load w[j"),
        "{text}"
    );
}

#[test]
fn a_build_that_also_checks_another_index_keeps_its_checks_in_the_step() {
    let mut p = program_with_sites(build_reading_at_its_counter(true), 3);
    passes::scalar_optimise(p.func_mut(FuncId(0)));
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // `w[i + 1]` may fail at a step before the one where `u` is too short: both checks stay
    // in the step, in order (the build fused into the sum that reads it, `fuse_consumers`).
    let loop_at = text.find("ifold").expect("the loop");
    let first = text.find("vl_index_i(1i, j").expect("u's check");
    let second = text.find("vl_index_i(2i, j").expect("w's check");
    assert!(loop_at < first && first < second, "{text}");
    assert_eq!(text.matches("vl_index_i").count(), 2, "{text}");
    assert!(!text.contains("ilt lu"), "{text}");
}

/// `f(x, g) = ifold (s, a) over x's indices`: each step checks that `a` (from `g`) is as long
/// as `x` (`plus`'s check of a sweep's accumulator), adds 1 to `a[i]` in place, adds `x[i]`
/// to `s`, and passes `a` on as itself (with `pass_on_copy`, a new array instead); it returns
/// `s` and `a`.
fn fold_passing_its_array_on(pass_on_copy: bool) -> Function {
    fold_passing_its_array_on_from(pass_on_copy, false)
}

/// `fold_passing_its_array_on`; with `null_start`, the fold starts from `h`, which is `g` if
/// the fold runs and null if not (as `peel` leaves a sweep's accumulator), and each step
/// first checks its counter against `g`'s length.
fn fold_passing_its_array_on_from(pass_on_copy: bool, null_start: bool) -> Function {
    let arr = Ty::Array(layout(&[Ty::F64]));
    let mut b = Builder::new();
    let x = b.named_var(arr.clone(), "x".into());
    let g = b.named_var(arr.clone(), "g".into());
    let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(x)));
    let start = if null_start {
        let h = b.var(arr.clone(), "h");
        b.push(Stmt::Declare(vec![h]));
        let runs = b.let1(
            Ty::Bool,
            "runs",
            Op::Binary(BinOp::ILt, Operand::I64(0), Operand::Var(n)),
        );
        b.push(Stmt::If {
            cond: Operand::Var(runs),
            then: vec![Stmt::Set(h, Operand::Var(g))],
            els: vec![Stmt::Set(h, Operand::Null)],
        });
        h
    } else {
        g
    };
    let (s, a, i) = (
        b.var(Ty::F64, "s"),
        b.var(arr.clone(), "a"),
        b.var(Ty::I64, "i"),
    );
    b.open();
    if null_start {
        // A check first (of `g`'s length, which is not null): what follows is not at the top
        // of the step, where a read runs in every step that runs.
        let lg = b.let1(Ty::I64, "lg", Op::Length(Operand::Var(g)));
        b.let1(
            Ty::I64,
            "k",
            Op::Rt(
                Rt::IndexI64,
                vec![Operand::I64(0), Operand::Var(i), Operand::Var(lg)],
            ),
        );
    }
    let m = b.let1(Ty::I64, "m", Op::Length(Operand::Var(a)));
    let differ = b.let1(
        Ty::Bool,
        "differ",
        Op::Binary(BinOp::INe, Operand::Var(n), Operand::Var(m)),
    );
    b.open();
    b.effect(Op::Rt(
        Rt::LengthFail,
        vec![
            Operand::Str("plus".into()),
            Operand::Var(m),
            Operand::Var(n),
        ],
    ));
    let fail = b.close();
    b.push(Stmt::If {
        cond: Operand::Var(differ),
        then: fail,
        els: vec![],
    });
    add_one_in_place(&mut b, a, i);
    let xi = load(&mut b, Ty::F64, "xi", x, Operand::Var(i));
    let s1 = b.let1(
        Ty::F64,
        "s",
        Op::Binary(BinOp::FAdd, Operand::Var(s), Operand::Var(xi)),
    );
    let passed = if pass_on_copy {
        b.let1(
            arr.clone(),
            "c",
            Op::NewArray {
                layout: layout(&[Ty::F64]),
                count: Operand::Var(m),
            },
        )
    } else {
        a
    };
    let body = b.close();
    b.push(Stmt::Ifold {
        accs: vec![s, a],
        init: vec![Operand::F64(0.0), Operand::Var(start)],
        count: Operand::Var(n),
        index: i,
        body,
        next: vec![Operand::Var(s1), Operand::Var(passed)],
    });
    b.push(Stmt::Return(vec![Operand::Var(s), Operand::Var(a)]));
    b.finish(spec(0), vec![x, g], layout(&[Ty::F64, arr]))
}

#[test]
fn an_accumulator_passed_on_as_itself_is_its_initial_value_and_its_check_leaves_the_loop() {
    let mut p = program(vec![fold_passing_its_array_on(false)]);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The fold carries `s` alone; the array is `g` throughout: its length and the check of
    // it run once, before the loop (where the loop runs), and the step adds into `g`.
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(text.contains("= ifold from (0.0) count n"), "{text}");
    assert!(at("length g") < at("= ifold"), "{text}");
    assert!(at("vl_length_fail") < at("= ifold"), "{text}");
    assert!(text.contains("store g[i"), "{text}");
    assert!(text.contains("return s") && text.contains(", g"), "{text}");
}

#[test]
fn an_accumulator_given_a_new_array_stays_carried() {
    let mut p = program(vec![fold_passing_its_array_on(true)]);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    let at = |needle: &str| text.find(needle).expect(needle);
    assert!(text.contains("= ifold from (0.0, g)"), "{text}");
    assert!(at("= ifold") < at("vl_length_fail"), "{text}");
}

#[test]
fn the_length_of_an_accumulator_that_may_be_null_is_not_taken_where_no_step_runs() {
    let mut p = program_with_sites(fold_passing_its_array_on_from(false, true), 1);
    verify(&p).unwrap();
    passes::simplify::run(&mut p);
    passes::simplify::run(&mut p);
    verify(&p).unwrap();
    let text = crate::print::function(&p, FuncId(0));
    // The fold carries `s` alone; the array's length, after the step's first check, is not
    // taken at the top of the function, where the array is null if the fold does not run.
    assert!(text.contains("= ifold from (0.0) count n"), "{text}");
    let length = text
        .lines()
        .find(|l| l.contains("= length h"))
        .expect(&text);
    assert!(length.starts_with("    "), "{text}");
}
