//! Input for `read-real` and output for `write`/`write-real`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, Write};
use std::rc::Rc;

/// Where `read-real` gets its numbers.
pub enum Input {
    /// Whitespace-separated numerals from standard input, read a line at a time.
    Stdin { pending: VecDeque<String> },
    /// A fixed list (conformance tests, `with-inputs`).
    Queue(VecDeque<f64>),
}

impl Input {
    pub fn stdin() -> Input {
        Input::Stdin {
            pending: VecDeque::new(),
        }
    }

    pub fn from_numbers(v: impl IntoIterator<Item = f64>) -> Input {
        Input::Queue(v.into_iter().collect())
    }

    /// The next real, or an error message.
    pub fn next_real(&mut self) -> Result<f64, String> {
        match self {
            Input::Queue(q) => q
                .pop_front()
                .ok_or_else(|| "read-real: end of input".to_string()),
            Input::Stdin { pending } => loop {
                if let Some(tok) = pending.pop_front() {
                    return vlad_syntax::number::parse_number(&tok)
                        .ok_or_else(|| format!("read-real: `{tok}` is not a number"));
                }
                let mut line = String::new();
                match std::io::stdin().lock().read_line(&mut line) {
                    Ok(0) => return Err("read-real: end of input".into()),
                    Ok(_) => pending.extend(line.split_whitespace().map(String::from)),
                    Err(e) => return Err(format!("read-real: {e}")),
                }
            },
        }
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
