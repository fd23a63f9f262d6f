//! Core as indented text (`vlad compile FILE --emit core`): `Arena::show`'s one-line
//! S-expression, broken into lines where a form is wider than the page.

use vlad_core::{Arena, ExprId};

/// How wide a line may grow before a form is broken over several.
const WIDTH: usize = 100;

enum Node {
    Atom(String),
    /// A list and the text that prefixes its `(` (a quote, `'#`, ...).
    List(String, Vec<Node>),
}

impl Node {
    fn flat_len(&self) -> usize {
        match self {
            Node::Atom(a) => a.len(),
            Node::List(p, items) => {
                p.len()
                    + 2
                    + items.iter().map(Node::flat_len).sum::<usize>()
                    + items.len().saturating_sub(1)
            }
        }
    }

    fn flat(&self, out: &mut String) {
        match self {
            Node::Atom(a) => out.push_str(a),
            Node::List(p, items) => {
                out.push_str(p);
                out.push('(');
                for (i, x) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    x.flat(out);
                }
                out.push(')');
            }
        }
    }

    fn pretty(&self, indent: usize, out: &mut String) {
        if indent + self.flat_len() <= WIDTH {
            self.flat(out);
            return;
        }
        let Node::List(p, items) = self else {
            self.flat(out);
            return;
        };
        out.push_str(p);
        out.push('(');
        let inner = indent + p.len() + 2;
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                out.push('\n');
                out.push_str(&" ".repeat(inner));
            }
            x.pretty(inner, out);
        }
        out.push(')');
    }
}

/// Parses `show`'s output (balanced parentheses, atoms without spaces). Iterative, so deep
/// Core cannot overflow the stack.
fn parse(text: &str) -> Vec<Node> {
    let mut stack: Vec<(String, Vec<Node>)> = vec![(String::new(), Vec::new())];
    let mut atom = String::new();
    let flush = |atom: &mut String, stack: &mut Vec<(String, Vec<Node>)>| {
        if !atom.is_empty() {
            let a = std::mem::take(atom);
            stack.last_mut().expect("root").1.push(Node::Atom(a));
        }
    };
    for c in text.chars() {
        match c {
            '(' => {
                let prefix = std::mem::take(&mut atom);
                stack.push((prefix, Vec::new()));
            }
            ')' => {
                flush(&mut atom, &mut stack);
                if stack.len() > 1 {
                    let (p, items) = stack.pop().expect("open list");
                    stack.last_mut().expect("root").1.push(Node::List(p, items));
                }
            }
            ' ' | '\n' => flush(&mut atom, &mut stack),
            c => atom.push(c),
        }
    }
    flush(&mut atom, &mut stack);
    while stack.len() > 1 {
        let (p, items) = stack.pop().expect("open list");
        stack.last_mut().expect("root").1.push(Node::List(p, items));
    }
    stack.pop().map(|r| r.1).unwrap_or_default()
}

/// `e` as indented text.
pub fn show_core(arena: &Arena, e: ExprId) -> String {
    let mut out = String::new();
    for n in parse(&arena.show(e)) {
        n.pretty(0, &mut out);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaks_wide_forms_and_keeps_narrow_ones() {
        let nodes = parse("(f '(1 . 2) (g x))");
        let mut s = String::new();
        nodes[0].pretty(0, &mut s);
        assert_eq!(s, "(f '(1 . 2) (g x))");
        let long = format!("(f {})", "abcdefghij ".repeat(12).trim_end());
        let mut s = String::new();
        parse(&long)[0].pretty(0, &mut s);
        assert!(
            s.lines().count() > 1 && s.lines().all(|l| l.len() <= WIDTH),
            "{s}"
        );
    }
}
