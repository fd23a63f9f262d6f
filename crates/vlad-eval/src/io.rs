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
    Stdout(Rc<RefCell<Option<WriteFailure>>>),
    /// Captured text (conformance tests).
    Buffer(Rc<RefCell<String>>),
}

/// Why standard output could not be written: the program stops (`Output::line` fails) and
/// `vlad` reports it, as compiled programs do (`vl_check_output` in `runtime.c`).
#[derive(Clone, Debug, PartialEq)]
pub enum WriteFailure {
    /// The reader went away (`vlad run prog | head -1`): the output ends, quietly and
    /// successfully, as a compiled program ends on its `SIGPIPE`.
    Closed,
    /// Any other error (a full disk, `> /dev/full`): the message, as C's `strerror` words it.
    Error(String),
}

impl Output {
    pub fn stdout() -> Output {
        Output::Stdout(Rc::new(RefCell::new(None)))
    }

    pub fn buffer() -> (Output, Rc<RefCell<String>>) {
        let b = Rc::new(RefCell::new(String::new()));
        (Output::Buffer(b.clone()), b)
    }

    /// Writes `s` and a newline; `Err` once standard output cannot be written (then nothing
    /// more is written: see `failure`).
    pub fn line(&mut self, s: &str) -> Result<(), String> {
        match self {
            Output::Stdout(failed) => {
                if failed.borrow().is_none() {
                    let mut o = std::io::stdout().lock();
                    if let Err(e) = writeln!(o, "{s}") {
                        *failed.borrow_mut() = Some(WriteFailure::from(&e));
                    }
                }
                match &*failed.borrow() {
                    None => Ok(()),
                    Some(f) => Err(f.message()),
                }
            }
            Output::Buffer(b) => {
                let mut b = b.borrow_mut();
                b.push_str(s);
                b.push('\n');
                Ok(())
            }
        }
    }

    /// Flushes standard output (before `read-real`, and after each top-level expression);
    /// a failure is recorded as `line`'s are.
    pub fn flush(&mut self) {
        if let Output::Stdout(failed) = self {
            if failed.borrow().is_none() {
                if let Err(e) = std::io::stdout().flush() {
                    *failed.borrow_mut() = Some(WriteFailure::from(&e));
                }
            }
        }
    }

    /// Why standard output could not be written, if it could not.
    pub fn failure(&self) -> Option<WriteFailure> {
        match self {
            Output::Stdout(failed) => failed.borrow().clone(),
            Output::Buffer(_) => None,
        }
    }
}

impl WriteFailure {
    fn from(e: &std::io::Error) -> WriteFailure {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            WriteFailure::Closed
        } else {
            WriteFailure::Error(os_message(e))
        }
    }

    /// The message `vlad` reports (none for a closed pipe).
    pub fn message(&self) -> String {
        match self {
            WriteFailure::Closed => "the output was closed".into(),
            WriteFailure::Error(e) => format!("cannot write the output: {e}"),
        }
    }
}
