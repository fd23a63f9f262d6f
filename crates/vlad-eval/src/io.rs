//! Input for `read-real` and output for `write`/`write-real`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::rc::Rc;

/// Where `read-real` gets its numbers.
pub enum Input {
    /// Numerals separated by whitespace on standard input.
    Stdin,
    /// Numerals separated by whitespace in a text (tests: the same input for each engine).
    Text(std::io::Cursor<Vec<u8>>),
    /// A fixed list (conformance tests, `with-inputs`).
    Queue(VecDeque<f64>),
}

impl Input {
    pub fn stdin() -> Input {
        Input::Stdin
    }

    pub fn from_numbers(v: impl IntoIterator<Item = f64>) -> Input {
        Input::Queue(v.into_iter().collect())
    }

    /// The numerals of `text`, read as standard input would be.
    pub fn from_text(text: impl Into<Vec<u8>>) -> Input {
        Input::Text(std::io::Cursor::new(text.into()))
    }

    /// The next real, or an error message.
    pub fn next_real(&mut self) -> Result<f64, String> {
        let token = match self {
            Input::Queue(q) => {
                return q
                    .pop_front()
                    .ok_or_else(|| "read-real: end of input".to_string())
            }
            Input::Stdin => next_token(&mut std::io::stdin().lock()),
            Input::Text(text) => next_token(text),
        };
        match token {
            Ok(Some(tok)) => vlad_syntax::number::numeral(&tok).ok_or_else(|| {
                format!(
                    "read-real: `{}` is not a number",
                    vlad_syntax::number::show_token(&tok)
                )
            }),
            Ok(None) => Err("read-real: end of input".into()),
            Err(e) => Err(format!(
                "read-real: cannot read standard input: {}",
                os_message(&e)
            )),
        }
    }
}

/// The next token of `input`: the bytes up to the next whitespace (`is_input_space`), after
/// skipping whitespace; `None` at the end. Compiled programs read the same way (`vl_token` in
/// `runtime.c`). Bytes, not text: a token that is not UTF-8 is reported, not a read error.
fn next_token(input: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    use vlad_syntax::number::is_input_space;
    let mut tok = Vec::new();
    loop {
        let buf = match input.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok((!tok.is_empty()).then_some(tok));
        }
        let mut used = 0;
        for &b in buf {
            used += 1;
            if is_input_space(b) {
                if !tok.is_empty() {
                    input.consume(used);
                    return Ok(Some(tok));
                }
            } else {
                tok.push(b);
            }
        }
        input.consume(used);
    }
}

/// An I/O error as C's `strerror` words it: Rust's message without its ` (os error N)`.
pub fn os_message(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Where `write` and `write-real` print.
#[derive(Clone)]
pub enum Output {
    Stdout,
    /// Captured text (conformance tests).
    Buffer(Rc<RefCell<String>>),
}

impl Output {
    pub fn stdout() -> Output {
        Output::Stdout
    }

    pub fn buffer() -> (Output, Rc<RefCell<String>>) {
        let b = Rc::new(RefCell::new(String::new()));
        (Output::Buffer(b.clone()), b)
    }

    pub fn line(&mut self, s: &str) {
        match self {
            Output::Stdout => {
                let mut o = std::io::stdout().lock();
                // A closed pipe is not an error of the program being run.
                let _ = writeln!(o, "{s}");
            }
            Output::Buffer(b) => {
                let mut b = b.borrow_mut();
                b.push_str(s);
                b.push('\n');
            }
        }
    }

    pub fn flush(&mut self) {
        if let Output::Stdout = self {
            let _ = std::io::stdout().flush();
        }
    }
}
