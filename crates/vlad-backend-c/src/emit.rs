//! The IR as C: a plain printer. Every decision (layouts, boxing, marks, tail calls, machines)
//! was made on the IR; this module only spells each statement in C.
//!
//! A leaf is a C variable (`double`, `long`, `V`, `vl_mark_t`, or a union's struct); a function
//! with several results returns a struct per result layout (`struct r_dd`). The runtime
//! (`runtime.c`) is included in every program, after the ABI constants (`abi.rs`).

use crate::abi;
use crate::units::{CFunction, CProgram};
use std::collections::HashMap;
use std::fmt::Write as _;
use vlad_ir::passes::loops;
use vlad_ir::*;

/// An error of the emitter: a program the passes should not have left in this shape.
#[derive(Debug)]
pub struct EmitError(pub String);

type R<T> = Result<T, EmitError>;

/// The C program for an IR program that went through the passes (`stats`: what they did).
pub fn emit(p: &Program, stats: &passes::Stats) -> R<CProgram> {
    let mut e = Emitter {
        p,
        structs: HashMap::new(),
        struct_defs: String::new(),
        unions: HashMap::new(),
        layouts: abi::LAYOUTS.iter().map(|(l, _)| l.to_string()).collect(),
    };
    let mut funcs = Vec::new();
    for id in p.ids() {
        let f = p.func(id);
        let signature = e.signature(id)?;
        let text = match &f.kind {
            FuncKind::Machine(m) => e.machine(id, m)?,
            FuncKind::MachineEntry { machine, member } => {
                e.machine_entry(id, *machine, *member, &signature)?
            }
            FuncKind::Export { name } => {
                let mut w = Writer::new(&mut e, f, None);
                w.block(&f.body, 1)?;
                // The library's entry point around it (runtime.c, VL_LIB_CALL).
                let params: Vec<String> = (0..f.params.len()).map(|i| format!("a{i}")).collect();
                let declared: Vec<String> =
                    params.iter().map(|a| format!("vlad_value {a}")).collect();
                let from_array: Vec<String> =
                    (0..f.params.len()).map(|i| format!("args[{i}]")).collect();
                format!(
                    "{signature} {{\n{}}}\n\nVL_EXPORT vlad_value vlad_{name}({}) {{\n  \
                     vlad_value r = 0;\n  VL_LIB_CALL(r, {}({}));\n  return r;\n}}\n\n\
                     VL_EXPORT vlad_value vlad_{name}_argv(const vlad_value *args) {{\n  \
                     (void)args;\n  return vlad_{name}({});\n}}\n\n",
                    w.out,
                    if declared.is_empty() {
                        "void".to_string()
                    } else {
                        declared.join(", ")
                    },
                    p.func_name(id),
                    params.join(", "),
                    from_array.join(", ")
                )
            }
            _ => {
                let mut w = Writer::new(&mut e, f, None);
                w.block(&f.body, 1)?;
                format!("{signature} {{\n{}}}\n\n", w.out)
            }
        };
        let pinned = matches!(f.kind, FuncKind::Helper { .. } | FuncKind::Export { .. });
        let exported = matches!(f.kind, FuncKind::Helper { exported: true, .. });
        funcs.push(CFunction {
            name: p.func_name(id),
            signature,
            text,
            callees: c_callees(p, id),
            unit0: pinned,
            exported,
        });
    }
    let mut head = String::new();
    head.push_str(&abi::constants());
    head.push_str(crate::RUNTIME);
    head.push_str("\nstatic const char *vl_prim_names[] = {");
    for n in &p.prim_names {
        let _ = write!(head, "{}, ", c_string(n));
    }
    // Each source line once, however many error sites are on it (a long line with many sites
    // would otherwise make the C grow as their product).
    let mut lines: Vec<&str> = Vec::new();
    let mut line_ids: HashMap<&str, usize> = HashMap::new();
    let mut sites = String::new();
    for s in &p.sites {
        let (line, text, col, width) = match &s.excerpt {
            Some(e) => {
                let id = *line_ids.entry(&e.text).or_insert_with(|| {
                    lines.push(&e.text);
                    lines.len() - 1
                });
                (e.line as i64, id as i64, e.col, e.width)
            }
            None => (-1, 0, 0, 0),
        };
        let _ = writeln!(
            sites,
            "  {{{}, {line}, {text}, {col}, {width}}},",
            c_string(&s.prefix)
        );
    }
    head.push_str("};\nstatic const char *vl_lines[] = {");
    for l in &lines {
        let _ = writeln!(head, "{},", c_string(l));
    }
    head.push_str("0};\nstatic const vl_site_t vl_sites[] = {\n");
    head.push_str(&sites);
    head.push_str("};\n");
    let mut code_slots = format!(
        "VL_SHARED const char *vl_code_slots[{}] = {{",
        p.code_slots.len().max(1)
    );
    for slots in &p.code_slots {
        match slots {
            Some(l) => {
                let letters: String = l.iter().map(letter).collect();
                let _ = write!(code_slots, "{}, ", c_string(&letters));
            }
            None => code_slots.push_str("0, "),
        }
    }
    code_slots.push_str("};\n");
    // The slots of each flat array layout (the collector reads which hold pointers).
    let _ = write!(
        code_slots,
        "VL_SHARED const char *vl_layouts[{}] = {{",
        e.layouts.len()
    );
    for l in &e.layouts {
        let _ = write!(code_slots, "{}, ", c_string(l));
    }
    code_slots.push_str("};\n\n");
    let mut globals = String::new();
    for g in &p.globals {
        let _ = writeln!(globals, "VL_SHARED {} {};", e.ctype(&g.ty), g.name);
    }
    let mut structs = std::mem::take(&mut e.struct_defs);
    let _ = writeln!(
        structs,
        "/* deep recursive components: {} with an explicit-stack machine, {} too large for one */",
        stats.machines.machines, stats.machines.too_large
    );
    Ok(CProgram {
        head,
        code_slots,
        structs,
        globals,
        funcs,
    })
}

/// The functions a function calls in C: the IR's calls, and a machine's entry calls the
/// machine.
fn c_callees(p: &Program, id: FuncId) -> Vec<usize> {
    let f = p.func(id);
    let mut out: Vec<usize> = callees(&f.body).iter().map(|c| c.0 as usize).collect();
    if let FuncKind::MachineEntry { machine, .. } = f.kind {
        out.push(machine.0 as usize);
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// A leaf's letter in result struct names and in `vl_code_slots` (which the runtime reads:
/// `d` real, `b` boolean or integer, `v` pointer).
fn letter(t: &Ty) -> char {
    match t {
        Ty::F64 => 'd',
        Ty::Bool | Ty::I64 => 'b',
        Ty::Boxed | Ty::Array(_) => 'v',
        Ty::Union(_) => 'u',
        Ty::Mark => 'm',
        Ty::Str => 's',
    }
}

/// The field of a runtime slot (`vl_slot`) that holds a leaf of this type.
fn slot_field(t: &Ty) -> &'static str {
    match t {
        Ty::F64 => "d",
        Ty::Boxed | Ty::Array(_) => "v",
        _ => "b",
    }
}

/// A C double literal with exactly the value `x`.
pub fn real_literal(x: f64) -> String {
    if x.is_nan() {
        "NAN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.into()
    } else {
        // Rust's `{:e}` is the shortest representation that reads back as `x`.
        format!("({x:e})")
    }
}

/// A C string literal.
pub fn c_string(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '?' => {
                let _ = write!(o, "\\{:03o}", c as u32);
            }
            c if c.is_ascii() => o.push(c),
            c => {
                let mut b = [0u8; 4];
                for byte in c.encode_utf8(&mut b).bytes() {
                    let _ = write!(o, "\\{byte:03o}");
                }
            }
        }
    }
    o.push('"');
    o
}

struct Emitter<'p> {
    p: &'p Program,
    /// The result structs defined so far, by their fields' C types.
    structs: HashMap<Vec<String>, String>,
    struct_defs: String,
    /// The union structs, by type.
    unions: HashMap<Ty, String>,
    /// The layouts of flat arrays, by number (`vl_layouts`, which the runtime reads: a flat
    /// array's `aux`), as `vl_code_slots` writes them.
    layouts: Vec<String>,
}

impl<'p> Emitter<'p> {
    /// The number of a flat array layout in `vl_layouts`.
    fn layout_id(&mut self, l: &[Ty]) -> usize {
        let letters: String = l.iter().map(letter).collect();
        match self.layouts.iter().position(|x| *x == letters) {
            Some(i) => i,
            None => {
                self.layouts.push(letters);
                self.layouts.len() - 1
            }
        }
    }

    fn ctype(&mut self, t: &Ty) -> String {
        match t {
            Ty::F64 => "double".into(),
            Ty::Bool | Ty::I64 => "long".into(),
            Ty::Boxed | Ty::Array(_) => "V".into(),
            Ty::Mark => "vl_mark_t".into(),
            Ty::Str => "const char *".into(),
            Ty::Union(vs) => {
                if let Some(n) = self.unions.get(t) {
                    return n.clone();
                }
                let name = format!("struct vl_u{}", self.unions.len());
                let mut def = format!("{name} {{ long tag; union {{");
                for (i, v) in vs.iter().enumerate() {
                    def.push_str(" struct {");
                    for (j, f) in v.iter().enumerate() {
                        let _ = write!(def, " {} f{j};", self.ctype(f));
                    }
                    let _ = write!(def, " }} v{i};");
                }
                def.push_str(" } u; };\n");
                self.struct_defs.push_str(&def);
                self.unions.insert(t.clone(), name.clone());
                name
            }
        }
    }

    /// The C type a function of these results returns.
    fn return_type(&mut self, layout: &[Ty]) -> String {
        match layout {
            [] => "void".into(),
            [t] => self.ctype(t),
            _ => {
                // One struct per list of C types: arrays and boxed values are both `V`.
                let ctypes: Vec<String> = layout.iter().map(|t| self.ctype(t)).collect();
                if let Some(s) = self.structs.get(&ctypes) {
                    return s.clone();
                }
                let letters: String = layout
                    .iter()
                    .map(|t| match t {
                        Ty::Union(_) => {
                            format!("u{}", self.unions[t].trim_start_matches("struct vl_u"))
                        }
                        t => letter(t).to_string(),
                    })
                    .collect();
                let name = format!("struct r_{letters}");
                let mut def = format!("{name} {{");
                for (i, c) in ctypes.iter().enumerate() {
                    let _ = write!(def, " {c} f{i};");
                }
                def.push_str(" };\n");
                self.struct_defs.push_str(&def);
                self.structs.insert(ctypes, name.clone());
                name
            }
        }
    }

    /// A function's signature (without storage class; `VL_COLD` for cold code).
    fn signature(&mut self, id: FuncId) -> R<String> {
        let f = self.p.func(id);
        let name = self.p.func_name(id);
        if let FuncKind::Machine(_) = f.kind {
            return Ok(format!(
                "VL_COLD void {name}(int vl_fn, void *vl_args, void *vl_ret)"
            ));
        }
        let ret = self.return_type(&f.results);
        let params: Vec<String> = f
            .params
            .iter()
            .map(|v| format!("{} {}", self.ctype(f.ty(*v)), f.name(*v)))
            .collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        let cold = if f.cold { "VL_COLD " } else { "" };
        Ok(format!("{cold}{ret} {name}({params})"))
    }

    /// The frame struct of member `j` of machine `m` (what is live across its calls of
    /// members), and its arguments' struct.
    fn frame_structs(&mut self, m: FuncId, j: usize, mb: &MachineMember, f: &Function) -> String {
        let mut s = format!("struct vl_fr{}_{j} {{ vl_frame h;", m.0);
        for v in &mb.frame {
            let _ = write!(s, " {} {};", self.ctype(f.ty(*v)), f.name(*v));
        }
        s.push_str(" };\n");
        if !mb.params.is_empty() {
            let _ = write!(s, "struct vl_ar{}_{j} {{", m.0);
            for v in &mb.params {
                let _ = write!(s, " {} {};", self.ctype(f.ty(*v)), f.name(*v));
            }
            s.push_str(" };\n");
        }
        s
    }

    fn machine(&mut self, id: FuncId, m: &'p Machine) -> R<String> {
        let f = self.p.func(id);
        let signature = self.signature(id)?;
        let mut structs = String::new();
        for (j, mb) in m.members.iter().enumerate() {
            structs.push_str(&self.frame_structs(id, j, mb, f));
        }
        self.struct_defs.push_str(&structs);
        let mi = id.0;
        // The frame header's member and resume point are 16 bits wide.
        let widest = m.members.iter().map(|mb| mb.resumes as usize);
        if m.members.len().max(widest.max().unwrap_or(0)) > usize::from(u16::MAX) {
            return Err(EmitError(
                "a machine with more than 65535 members or resume points".into(),
            ));
        }
        let mut text = format!("{signature} {{\n  vl_frame *vl_h = 0;\n");
        for j in 0..m.members.len() {
            let _ = writeln!(text, "  struct vl_fr{mi}_{j} *vl_F{j} = 0;");
        }
        // Arguments travel from a call to the callee's entry in `vl_A`, results from a return
        // to the resume point in `vl_res`: in between, only the dispatch runs, so neither
        // needs a place in a frame.
        let mut args = String::new();
        let mut results = String::new();
        for (j, mb) in m.members.iter().enumerate() {
            if !mb.params.is_empty() {
                let _ = write!(args, " struct vl_ar{mi}_{j} m{j};");
            }
            if !mb.results.is_empty() {
                let rt = self.return_type(&mb.results);
                let _ = write!(results, " {rt} m{j};");
            }
        }
        if !args.is_empty() {
            let _ = writeln!(text, "  union {{{args} }} vl_A;");
        }
        if !results.is_empty() {
            let _ = writeln!(text, "  union {{{results} }} vl_res;");
        }
        text.push_str("  switch (vl_fn) {\n");
        for (j, mb) in m.members.iter().enumerate() {
            let _ = write!(
                text,
                "  case {j}: {{ struct vl_fr{mi}_{j} *vl_c = (struct vl_fr{mi}_{j} *)vl_push(sizeof(struct vl_fr{mi}_{j})); vl_c->h.fn = {j}; vl_c->h.pc = 0; vl_c->h.back = 0;"
            );
            if !mb.params.is_empty() {
                let _ = write!(text, " vl_A.m{j} = *(struct vl_ar{mi}_{j} *)vl_args;");
            }
            text.push_str(" vl_h = &vl_c->h; break; }\n");
        }
        text.push_str(
            "  default: (void)vl_args; vl_fail_internal(\"a machine entered at no member\");\n  }\n",
        );
        text.push_str("vl_run:\n  switch (vl_h->fn) {\n");
        for (j, mb) in m.members.iter().enumerate() {
            let _ = write!(
                text,
                "  case {j}: vl_F{j} = (struct vl_fr{mi}_{j} *)vl_h; switch (vl_h->pc) {{ case 0: goto vl_L{j}_0;"
            );
            for r in 1..=mb.resumes {
                let _ = write!(text, " case {r}: goto vl_L{j}_{r};");
            }
            text.push_str(" } break;\n");
        }
        text.push_str(
            "  }\n  vl_fail_internal(\"a frame of the explicit stack is corrupt\");\n  return;\n\
             vl_pop: { unsigned vl_b = vl_h->back; vl_xs_top = (char *)vl_h; if (!vl_b) return; vl_h = (vl_frame *)((char *)vl_h - vl_b); goto vl_run; }\n",
        );
        for s in &f.body {
            let Stmt::Member { member, body } = s else {
                return Err(EmitError("a machine statement outside a member".into()));
            };
            let j = *member as usize;
            let mb = &m.members[j];
            let mut w = Writer::new(self, f, Some((mi, j, m, mb)));
            let _ = writeln!(w.out, "  {{\nvl_L{j}_0: ;");
            for v in &mb.params {
                let lhs = w.define(*v);
                let _ = writeln!(w.out, "    {lhs}vl_A.m{j}.{};", f.name(*v));
            }
            w.block(body, 2)?;
            w.out.push_str("    goto vl_pop;\n  }\n");
            text.push_str(&w.out);
        }
        text.push_str("}\n\n");
        Ok(text)
    }

    fn machine_entry(
        &mut self,
        _id: FuncId,
        machine: FuncId,
        member: u32,
        signature: &str,
    ) -> R<String> {
        let p = self.p;
        let FuncKind::Machine(m) = &p.func(machine).kind else {
            return Err(EmitError("a machine entry of no machine".into()));
        };
        let e = &m.members[member as usize];
        let f = p.func(e.func);
        let mname = p.func_name(machine);
        let mut text = format!("{signature} {{\n  ");
        let args = if f.params.is_empty() {
            "0".to_string()
        } else {
            let names: Vec<&str> = f.params.iter().map(|v| f.name(*v)).collect();
            let _ = write!(
                text,
                "struct vl_ar{}_{member} vl_a = {{{}}};\n  ",
                machine.0,
                names.join(", ")
            );
            "&vl_a".to_string()
        };
        if f.results.is_empty() {
            let _ = write!(text, "{mname}({member}, {args}, 0);\n}}\n\n");
        } else {
            let ret = self.return_type(&f.results);
            let _ = write!(
                text,
                "{ret} vl_r;\n  {mname}({member}, {args}, &vl_r);\n  return vl_r;\n}}\n\n"
            );
        }
        Ok(text)
    }
}

/// Writes one function's statements.
struct Writer<'e, 'p> {
    e: &'e mut Emitter<'p>,
    f: &'p Function,
    /// In a machine: its number, the member's index, the machine and the member.
    machine: Option<(u32, usize, &'p Machine, &'p MachineMember)>,
    frame: std::collections::HashSet<Var>,
    /// The new arrays a loop here may fill without GCC's run-time overlap tests
    /// (`vlad_ir::passes::loops::update_fresh`).
    fresh: Vec<Var>,
    out: String,
    tmp: usize,
}

impl<'e, 'p> Writer<'e, 'p> {
    fn new(
        e: &'e mut Emitter<'p>,
        f: &'p Function,
        machine: Option<(u32, usize, &'p Machine, &'p MachineMember)>,
    ) -> Writer<'e, 'p> {
        let frame = machine
            .map(|(_, _, _, mb)| mb.frame.iter().copied().collect())
            .unwrap_or_default();
        Writer {
            e,
            f,
            machine,
            frame,
            fresh: Vec::new(),
            out: String::new(),
            tmp: 0,
        }
    }

    fn line(&mut self, depth: usize, s: impl AsRef<str>) {
        for _ in 0..depth.min(vlad_ir::MAX_INDENT) {
            self.out.push_str("  ");
        }
        self.out.push_str(s.as_ref());
        self.out.push('\n');
    }

    fn fresh(&mut self) -> String {
        self.tmp += 1;
        format!("vl_t{}", self.tmp)
    }

    /// A variable as C: a frame field in a machine, else its name.
    fn var(&self, v: Var) -> String {
        match self.machine {
            Some((_, j, _, _)) if self.frame.contains(&v) => {
                format!("vl_F{j}->{}", self.f.name(v))
            }
            _ => self.f.name(v).to_string(),
        }
    }

    fn operand(&self, x: &Operand) -> String {
        match x {
            Operand::Var(v) => self.var(*v),
            Operand::F64(x) => real_literal(*x),
            Operand::Bool(b) => (*b as u8).to_string(),
            Operand::I64(n) => n.to_string(),
            Operand::Null => "0".into(),
            Operand::Global(g) => self.e.p.globals[g.0 as usize].name.clone(),
            Operand::Str(s) => c_string(s),
        }
    }

    fn operands(&self, xs: &[Operand]) -> String {
        xs.iter()
            .map(|x| self.operand(x))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn operand_ty(&self, x: &Operand) -> Option<Ty> {
        match x {
            Operand::Var(v) => Some(self.f.ty(*v).clone()),
            Operand::Global(g) => Some(self.e.p.globals[g.0 as usize].ty.clone()),
            _ => None,
        }
    }

    /// `{ vl_A.mG.p = a; ...`: a call's arguments stored in the machine's argument area for
    /// member `g`, whose entry copies them into its frame or C locals.
    fn machine_args(&self, g: usize, params: &[Var], args: &[Operand]) -> String {
        let mut s = String::from("{ ");
        for (v, a) in params.iter().zip(args) {
            let _ = write!(s, "vl_A.m{g}.{} = {}; ", self.f.name(*v), self.operand(a));
        }
        s
    }

    /// `T v = ` (a declaration), or `vl_F->v = ` for a frame variable.
    fn define(&mut self, v: Var) -> String {
        if self.machine.is_some() && self.frame.contains(&v) {
            format!("{} = ", self.var(v))
        } else {
            let t = self.e.ctype(self.f.ty(v));
            format!("{t} {} = ", self.f.name(v))
        }
    }

    /// A block's statements. A nested block starts with the new arrays of the path to it; a
    /// loop's body starts with none (`Stmt::For`, `Stmt::Loop`).
    fn block(&mut self, b: &[Stmt], depth: usize) -> R<()> {
        let outer = self.fresh.clone();
        for s in b {
            self.stmt(s, depth)?;
            loops::update_fresh(&mut self.fresh, s);
        }
        self.fresh = outer;
        Ok(())
    }

    /// A loop's body, which starts with no new arrays: one made before the loop may be held by
    /// another variable from an earlier iteration.
    fn loop_body(&mut self, b: &[Stmt], depth: usize) -> R<()> {
        let outer = std::mem::take(&mut self.fresh);
        let r = self.block(b, depth);
        self.fresh = outer;
        r
    }

    /// The C expression of an operation with one result (or none).
    fn op(&mut self, op: &Op) -> R<String> {
        Ok(match op {
            Op::Copy(x) => self.operand(x),
            Op::Unary(u, x) => {
                let x = self.operand(x);
                match u {
                    UnOp::Sqrt => format!("sqrt({x})"),
                    UnOp::Exp => format!("exp({x})"),
                    UnOp::Log => format!("log({x})"),
                    UnOp::Sin => format!("sin({x})"),
                    UnOp::Cos => format!("cos({x})"),
                    UnOp::F64ToI64 => format!("(long)({x})"),
                    UnOp::I64ToF64 => format!("(double){x}"),
                    UnOp::Not => format!("!{x}"),
                }
            }
            Op::Binary(b, x, y) => {
                let (x, y) = (self.operand(x), self.operand(y));
                let op = match b {
                    BinOp::FAtan2 => return Ok(format!("atan2({x}, {y})")),
                    BinOp::FAdd | BinOp::IAdd => "+",
                    BinOp::FSub | BinOp::ISub => "-",
                    BinOp::FMul | BinOp::IMul => "*",
                    BinOp::FDiv => "/",
                    BinOp::FEq | BinOp::IEq | BinOp::BEq => "==",
                    BinOp::INe => "!=",
                    BinOp::FLt | BinOp::ILt => "<",
                    BinOp::FGt => ">",
                    BinOp::FLe => "<=",
                    BinOp::FGe => ">=",
                    // Booleans are 0 or 1 (comparisons, constants, the runtime's tests), and
                    // both operands are computed already: bitwise, so that GCC vectorises a
                    // loop that folds a test with `and` (the guard of `passes::sparse`), which
                    // it does not with `&&`.
                    BinOp::And => "&",
                    BinOp::Or => "|",
                };
                format!("({x} {op} {y})")
            }
            Op::Call { func, args, guard } => {
                let name = self.e.p.func_name(*func);
                let args = self.operands(args);
                match guard {
                    Some(g) => format!(
                        "VL_DEEP() ? {}({args}) : {name}({args})",
                        self.e.p.func_name(*g)
                    ),
                    None => format!("{name}({args})"),
                }
            }
            Op::Rt(rt, args) => format!("{}({})", rt.c_name(), self.operands(args)),
            Op::NewArray { layout, count } => {
                let id = self.e.layout_id(layout);
                // Pointer slots start null: the collector reads every slot of the arrays it
                // copies, and an array whose element code never returns is left unfilled.
                let f = if layout.iter().any(Ty::is_pointer) {
                    "vl_flat_zeroed"
                } else {
                    "vl_flat"
                };
                format!("{f}({}, {}, {id})", self.operand(count), layout.len())
            }
            Op::ArrayOf { .. } => {
                return Err(EmitError("an array literal inside an expression".into()))
            }
            Op::Load { array, index, slot } => {
                let Some(Ty::Array(l)) = self.operand_ty(array) else {
                    return Err(EmitError("a load from a non-array".into()));
                };
                let field = slot_field(&l[*slot as usize]);
                format!(
                    "{}->s[1 + {} * {} + {slot}].{field}",
                    self.operand(array),
                    self.operand(index),
                    l.len()
                )
            }
            Op::Length(a) => format!("{}->s[0].b", self.operand(a)),
            Op::Field { obj, slot, ty } => {
                format!("{}->s[{slot}].{}", self.operand(obj), slot_field(ty))
            }
            Op::IsKind(x, k) => format!("({}->kind == {})", self.operand(x), k.c_name()),
            Op::Cast(x, _) => self.operand(x),
            Op::CodeOf(x) => {
                let x = self.operand(x);
                format!(
                    "({x}->kind == VL_CLOSURE ? (long){x}->aux : {x}->kind == VL_PRIM ? -1 - (long){x}->aux : -1000000)"
                )
            }
            Op::Mark => "vl_mark()".into(),
            Op::MakeUnion {
                ty,
                variant,
                fields,
            } => {
                let t = self.e.ctype(ty);
                let fs = self.operands(fields);
                format!("({t}){{.tag = {variant}, .u.v{variant} = {{{fs}}}}}")
            }
            Op::UnionTag(x) => format!("{}.tag", self.operand(x)),
            Op::UnionField {
                value,
                variant,
                index,
            } => format!("{}.u.v{variant}.f{index}", self.operand(value)),
            Op::ReleaseCarrying { .. } | Op::Collect { .. } => {
                return Err(EmitError(
                    "a release carrying values inside an expression".into(),
                ))
            }
        })
    }

    fn stmt(&mut self, s: &Stmt, d: usize) -> R<()> {
        match s {
            Stmt::Let(vs, Op::ReleaseCarrying { mark, arrays }) => {
                let c = self.fresh();
                let items = self.operands(arrays);
                let m = self.operand(mark);
                self.line(d, format!("V {c}[] = {{{items}}};"));
                self.line(
                    d,
                    format!("vl_release_carrying({m}, {c}, {});", arrays.len()),
                );
                for (n, v) in vs.iter().enumerate() {
                    let lhs = self.define(*v);
                    self.line(d, format!("{lhs}{c}[{n}];"));
                }
            }
            Stmt::Let(
                vs,
                Op::Collect {
                    mark,
                    budget,
                    values,
                },
            ) => {
                // The results are the values and the budget unless the collection is due;
                // then the values go through an array the collector updates, and nothing else
                // holds them after it (the verifier's rule for releases). Tested first, so
                // that the values need not be in memory at the steps that do not collect.
                let Some((after, kept)) = vs.split_last() else {
                    return Err(EmitError("a collection without results".into()));
                };
                for (v, x) in kept.iter().zip(values) {
                    let lhs = self.define(*v);
                    let x = self.operand(x);
                    self.line(d, format!("{lhs}{x};"));
                }
                let lhs = self.define(*after);
                let b = self.operand(budget);
                self.line(d, format!("{lhs}{b};"));
                let c = self.fresh();
                let items: Vec<String> = kept.iter().map(|v| self.var(*v)).collect();
                let m = self.operand(mark);
                let after = self.var(*after);
                let mut text = format!(
                    "if (vl_collect_due({m}, {after})) {{ V {c}[] = {{{}}}; \
                     {after} = vl_collect({m}, {c}, {}, {after});",
                    items.join(", "),
                    items.len()
                );
                for (n, v) in items.iter().enumerate() {
                    let _ = write!(text, " {v} = {c}[{n}];");
                }
                text.push_str(" }");
                self.line(d, text);
            }
            Stmt::Let(vs, Op::ArrayOf { layout, slots }) => {
                // The slots as static data, copied into a new array.
                let data = self.fresh();
                let mut init = String::new();
                for (i, x) in slots.iter().enumerate() {
                    let (field, value) = match x {
                        Operand::F64(v) => ("d", real_literal(*v)),
                        Operand::Bool(b) => ("b", (*b as u8).to_string()),
                        Operand::I64(n) => ("b", n.to_string()),
                        _ => return Err(EmitError("an array literal of a variable".into())),
                    };
                    let _ = write!(init, "{{.{field} = {value}}},");
                    if i % 8 == 7 {
                        init.push('\n');
                    }
                }
                self.line(d, format!("static const vl_slot {data}[] = {{\n{init}}};"));
                let n = slots.len() / layout.len().max(1);
                for v in vs {
                    let lhs = self.define(*v);
                    let id = self.e.layout_id(layout);
                    self.line(
                        d,
                        format!("{lhs}vl_flat_of({n}, {}, {id}, {data});", layout.len()),
                    );
                }
            }
            Stmt::Let(vs, Op::Call { func, args, guard }) if guard.is_some() && vs.is_empty() => {
                let name = self.e.p.func_name(*func);
                let g = self.e.p.func_name(guard.expect("a guard"));
                let args = self.operands(args);
                self.line(
                    d,
                    format!("if (VL_DEEP()) {g}({args}); else {name}({args});"),
                );
            }
            Stmt::Let(vs, op) => {
                let e = self.op(op)?;
                match vs.as_slice() {
                    [] => self.line(d, format!("{e};")),
                    [v] => {
                        let lhs = self.define(*v);
                        self.line(d, format!("{lhs}{e};"));
                    }
                    _ => {
                        let tys: Vec<Ty> = vs.iter().map(|v| self.f.ty(*v).clone()).collect();
                        let st = self.e.return_type(&tys);
                        let t = self.fresh();
                        self.line(d, format!("{st} {t} = {e};"));
                        for (i, v) in vs.iter().enumerate() {
                            let lhs = self.define(*v);
                            self.line(d, format!("{lhs}{t}.f{i};"));
                        }
                    }
                }
            }
            Stmt::Declare(vs) => {
                for v in vs {
                    if self.machine.is_some() && self.frame.contains(v) {
                        continue;
                    }
                    let t = self.e.ctype(self.f.ty(*v));
                    self.line(d, format!("{t} {};", self.f.name(*v)));
                }
            }
            Stmt::Set(v, x) => {
                let t = format!("{} = {};", self.var(*v), self.operand(x));
                self.line(d, t);
            }
            Stmt::Site(n) => self.line(d, format!("vl_site = {n};")),
            Stmt::Store {
                array,
                index,
                slot,
                value,
            } => {
                let Some(Ty::Array(l)) = self.operand_ty(array) else {
                    return Err(EmitError("a store into a non-array".into()));
                };
                let field = slot_field(&l[*slot as usize]);
                let t = format!(
                    "{}->s[1 + {} * {} + {slot}].{field} = {};",
                    self.operand(array),
                    self.operand(index),
                    l.len(),
                    self.operand(value)
                );
                self.line(d, t);
            }
            Stmt::SetField { obj, slot, value } => {
                let ty = self.operand_ty(value);
                let field = match (&ty, value) {
                    (Some(t), _) => slot_field(t),
                    (None, Operand::F64(_)) => "d",
                    (None, Operand::Bool(_) | Operand::I64(_)) => "b",
                    _ => "v",
                };
                let t = format!(
                    "{}->s[{slot}].{field} = {};",
                    self.operand(obj),
                    self.operand(value)
                );
                self.line(d, t);
            }
            Stmt::SetGlobal(g, x) => {
                let t = format!(
                    "{} = {};",
                    self.e.p.globals[g.0 as usize].name,
                    self.operand(x)
                );
                self.line(d, t);
            }
            Stmt::Release(m) => {
                let t = format!("vl_release({});", self.operand(m));
                self.line(d, t);
            }
            Stmt::If { cond, then, els } => {
                let c = self.operand(cond);
                if then.is_empty() {
                    self.line(d, format!("if (!{c}) {{"));
                    self.block(els, d + 1)?;
                    self.line(d, "}");
                    return Ok(());
                }
                self.line(d, format!("if ({c}) {{"));
                self.block(then, d + 1)?;
                if !els.is_empty() {
                    self.line(d, "} else {");
                    self.block(els, d + 1)?;
                }
                self.line(d, "}");
            }
            Stmt::Switch { on, cases, default } => {
                let o = self.operand(on);
                self.line(d, format!("switch ({o}) {{"));
                for (vals, b) in cases {
                    let labels: Vec<String> = vals.iter().map(|v| format!("case {v}:")).collect();
                    self.line(d, format!("{} {{", labels.join(" ")));
                    self.block(b, d + 1)?;
                    self.line(d + 1, "break;");
                    self.line(d, "}");
                }
                self.line(d, "default: {");
                self.block(default, d + 1)?;
                self.line(d, "}");
                self.line(d, "}");
            }
            Stmt::For { index, count, body } => {
                let n = self.operand(count);
                let i = self.var(*index);
                let decl = if self.machine.is_some() && self.frame.contains(index) {
                    i.clone()
                } else {
                    format!("long {i}")
                };
                // Not in a machine, whose members are entered again at their resume points.
                if self.machine.is_none()
                    && loops::iterations_independent(&self.fresh, *index, body)
                {
                    self.line(d, "#pragma GCC ivdep");
                }
                self.line(d, format!("for ({decl} = 0; {i} < {n}; {i}++) {{"));
                self.loop_body(body, d + 1)?;
                self.line(d, "}");
            }
            Stmt::Loop(body) => {
                self.line(d, "for (;;) {");
                self.loop_body(body, d + 1)?;
                self.line(d, "}");
            }
            Stmt::Continue => self.line(d, "continue;"),
            Stmt::Return(xs) => {
                let value = match xs.as_slice() {
                    [] => None,
                    [x] => Some(self.operand(x)),
                    _ => {
                        let tys: Vec<Ty> = match self.machine {
                            Some((_, _, _, mb)) => mb.results.to_vec(),
                            None => self.f.results.to_vec(),
                        };
                        let st = self.e.return_type(&tys);
                        Some(format!("({st}){{{}}}", self.operands(xs)))
                    }
                };
                match (self.machine, value) {
                    (None, None) => self.line(d, "return;"),
                    (None, Some(v)) => self.line(d, format!("return {v};")),
                    (Some(_), None) => self.line(d, "goto vl_pop;"),
                    // The bottom frame returns to the machine's caller.
                    (Some((_, j, _, mb)), Some(v)) => {
                        let rt = self.e.return_type(&mb.results);
                        self.line(
                            d,
                            format!(
                                "{{ {rt} vl_rv = {v}; if (vl_h->back) vl_res.m{j} = vl_rv; else if (vl_ret) *({rt} *)vl_ret = vl_rv; goto vl_pop; }}"
                            ),
                        );
                    }
                }
            }
            Stmt::TailCall { func, args } => {
                let call = format!("{}({})", self.e.p.func_name(*func), self.operands(args));
                // C has no `return` of a void expression; the call stays a jump.
                let t = if self.f.results.is_empty() {
                    format!("{call}; return;")
                } else {
                    format!("return {call};")
                };
                self.line(d, t);
            }
            Stmt::MachineCall {
                member,
                args,
                results,
                resume,
            } => {
                let Some((mi, j, m, _)) = self.machine else {
                    return Err(EmitError("a machine call outside a machine".into()));
                };
                let g = *member as usize;
                let callee = &m.members[g];
                let mut s = self.machine_args(g, &callee.params, args);
                let _ = write!(
                    s,
                    "struct vl_fr{mi}_{g} *vl_c = (struct vl_fr{mi}_{g} *)vl_push(sizeof(struct vl_fr{mi}_{g})); vl_c->h.fn = {g}; vl_c->h.pc = 0; vl_c->h.back = (unsigned)((char *)vl_c - (char *)vl_h); vl_h->pc = {resume}; vl_h = &vl_c->h; goto vl_run; vl_L{j}_{resume}: ; }}"
                );
                self.line(d, s);
                match results.as_slice() {
                    [] => {}
                    [v] => {
                        let lhs = self.define(*v);
                        self.line(d, format!("{lhs}vl_res.m{g};"));
                    }
                    _ => {
                        for (i, v) in results.iter().enumerate() {
                            let lhs = self.define(*v);
                            self.line(d, format!("{lhs}vl_res.m{g}.f{i};"));
                        }
                    }
                }
            }
            Stmt::MachineTailCall { member, args } => {
                let Some((mi, _, m, _)) = self.machine else {
                    return Err(EmitError("a machine tail call outside a machine".into()));
                };
                let g = *member as usize;
                let callee = &m.members[g];
                // The arguments are read out of the old frame before the new one replaces it.
                let mut s = self.machine_args(g, &callee.params, args);
                let _ = write!(
                    s,
                    "unsigned vl_b = vl_h->back; vl_xs_top = (char *)vl_h; struct vl_fr{mi}_{g} *vl_c = (struct vl_fr{mi}_{g} *)vl_push(sizeof(struct vl_fr{mi}_{g})); vl_c->h.fn = {g}; vl_c->h.pc = 0; vl_c->h.back = vl_b; vl_h = &vl_c->h; goto vl_run; }}"
                );
                self.line(d, s);
            }
            Stmt::Build { .. } | Stmt::Ifold { .. } => {
                return Err(EmitError(
                    "a build or ifold the loop pass did not lower".into(),
                ))
            }
            Stmt::Member { .. } => {
                return Err(EmitError("a machine member outside its machine".into()))
            }
        }
        Ok(())
    }
}

/// The C header of a shared library (`vlad compile --lib`): the runtime's interface for values,
/// and each exported procedure: its name, its parameters' names and a comment describing it.
pub fn header(guard: &str, exports: &[HeaderEntry]) -> String {
    let mut out = format!(
        "/* Generated by vlad: the interface of a shared library compiled from a VLAD program. */\n\
         #ifndef {guard}\n#define {guard}\n\n#ifdef __cplusplus\nextern \"C\" {{\n#endif\n\n"
    );
    out.push_str(LIBRARY_INTERFACE);
    for e in exports {
        let params: Vec<String> = e.params.iter().map(|p| format!("vlad_value {p}")).collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        let _ = writeln!(
            out,
            "\n/* {} */\nvlad_value vlad_{}({params});\n/* The same, the arguments in an \
             array. */\nvlad_value vlad_{}_argv(const vlad_value *args);",
            e.comment, e.name, e.name
        );
    }
    out.push_str("\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
    out
}

/// An exported procedure as the header declares it.
pub struct HeaderEntry {
    /// The C name is `vlad_NAME`.
    pub name: String,
    pub params: Vec<String>,
    pub comment: String,
}

/// The part of every library's header that does not depend on the program (the definitions
/// are in runtime.c, under VL_LIBRARY).
const LIBRARY_INTERFACE: &str = r#"/* A value: a real, a boolean, (), a pair, or an array. Values live in the library's arena: a
   call's arguments and result stay valid until vlad_reset(). The library is not thread-safe:
   make one call at a time. */
typedef struct vl_obj *vlad_value;

/* Builds the program's constants (each entry point calls it first): 0, or -1. */
int vlad_init(void);
/* Frees every value made since vlad_init (the values calls returned included). */
void vlad_reset(void);
/* The message of the last error: an entry point that returns 0 failed (the message is the one
   `vlad run` would print, with the position in the program). */
const char *vlad_error(void);

/* Arguments, one C parameter per argument of the procedure. A real is vlad_real(x); an array
   of reals, vlad_array_f64(xs, n) (copied); an array of arrays, vlad_array(elements, n) of
   arrays made so. An array a call returned may be passed too. */
vlad_value vlad_real(double x);
vlad_value vlad_array_f64(const double *xs, long n);
vlad_value vlad_array(const vlad_value *xs, long n);

/* Results. */
enum { VLAD_NIL, VLAD_BOOLEAN, VLAD_REAL, VLAD_PAIR, VLAD_ARRAY, VLAD_OTHER };
int vlad_kind(vlad_value v);
double vlad_real_of(vlad_value v);
int vlad_boolean_of(vlad_value v);
vlad_value vlad_car(vlad_value pair);
vlad_value vlad_cdr(vlad_value pair);
long vlad_length(vlad_value array);
vlad_value vlad_at(vlad_value array, long i);
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// `f0(a) { b = new array(f64) count (length a); [for j < 2 {] for i < n { store b[i] =
    /// load a[i] } [}] }`, in C.
    fn fill(nested: bool) -> String {
        let arr = Ty::Array([Ty::F64].into_iter().collect());
        let mut b = Builder::new();
        let a = b.named_var(arr.clone(), "a".into());
        let n = b.let1(Ty::I64, "n", Op::Length(Operand::Var(a)));
        let out = b.let1(
            arr,
            "b",
            Op::NewArray {
                layout: [Ty::F64].into_iter().collect(),
                count: Operand::Var(n),
            },
        );
        let i = b.var(Ty::I64, "i");
        b.open();
        let x = b.let1(
            Ty::F64,
            "x",
            Op::Load {
                array: Operand::Var(a),
                index: Operand::Var(i),
                slot: 0,
            },
        );
        b.push(Stmt::Store {
            array: Operand::Var(out),
            index: Operand::Var(i),
            slot: 0,
            value: Operand::Var(x),
        });
        let mut body = b.close();
        let count = Operand::Var(n);
        let mut fill = Stmt::For {
            index: i,
            count,
            body,
        };
        if nested {
            let j = b.var(Ty::I64, "j");
            body = vec![fill];
            fill = Stmt::For {
                index: j,
                count: Operand::I64(2),
                body,
            };
        }
        b.push(fill);
        b.push(Stmt::Return(vec![]));
        let f = b.finish(FuncKind::Specialised { key: 0 }, vec![a], Vec::new().into());
        let p = Program {
            funcs: vec![f],
            ..Program::default()
        };
        let c = emit(&p, &passes::Stats::default()).expect("emits");
        c.funcs[0].text.clone()
    }

    #[test]
    fn a_loop_that_fills_a_new_array_is_marked_independent() {
        let c = fill(false);
        assert!(c.contains("#pragma GCC ivdep\n  for (long i"), "{c}");
        // In a loop, the array was made before it: not the loop inside's to assume new (an
        // earlier iteration may have handed it on).
        let c = fill(true);
        assert!(!c.contains("ivdep"), "{c}");
    }
}
