//! What compiling a program may cost, and what `vlad` measures of it: the CPU time and the
//! memory of this process, and the wall-clock time.
//!
//! Limits are in CPU seconds, not wall seconds: on a loaded machine (two cores, several
//! builds) the analysis gets a fraction of a core, and a wall-clock limit would stop it, and
//! have the decision remembered, for a program it finishes in a few seconds on an idle one. A
//! decision taken on CPU time is the same on a busy machine and an idle one, so `vlad run`
//! records it in the source cache. A wall-clock limit remains, ten times the CPU limit, for a
//! machine so loaded that the CPU limit would take too long to reach; what it stops is not
//! recorded (the next run tries again).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The CPU time this process has used (all its threads), in seconds.
pub fn cpu_seconds() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write to; the clock exists on every POSIX system.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) } == 0;
    if ok {
        t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
    } else {
        0.0
    }
}

/// The most memory this process has held at once (its peak resident set), in bytes.
pub fn peak_memory() -> u64 {
    // SAFETY: an all-zero rusage is a valid value, which getrusage overwrites.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage to write to.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    // Kilobytes on Linux (bytes on macOS, where this overestimates: a limit reached sooner).
    u.ru_maxrss.max(0) as u64 * 1024
}

/// A setting in the environment (a non-negative number), or `default`.
fn setting(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|x| x.is_finite() && *x >= 0.0)
        .unwrap_or(default)
}

/// How long the flow analysis may take, in CPU seconds, if `VLAD_ANALYSIS_TIMEOUT_SECS` says.
fn analysis_setting() -> Option<f64> {
    std::env::var_os("VLAD_ANALYSIS_TIMEOUT_SECS")
        .map(|_| setting("VLAD_ANALYSIS_TIMEOUT_SECS", 20.0))
}

/// How long the flow analysis of `vlad compile` may take, in CPU seconds:
/// `VLAD_ANALYSIS_TIMEOUT_SECS`, default 20 (every example needs well under 1 s; the largest
/// test program, tests/array/property.vlad, about 15).
pub fn analysis_seconds() -> f64 {
    analysis_setting().unwrap_or(20.0)
}

/// What `vlad run` may spend compiling a program, in CPU seconds, analysis, C generation and
/// the C compiler included: `VLAD_COMPILE_BUDGET_SECS`, default 20. A program that would cost
/// more runs in the evaluator (`vlad compile -o` compiles it whatever the cost). The
/// examples cost 1.2 (factorial) to 26 (array-calculus) CPU seconds to compile on this
/// project's machine, their evaluator runs 0.01 s to minutes: 20 compiles those whose
/// evaluator runs are long (saddle, particle), and leaves the evaluator a program that only
/// a costlier compile would speed up, at first (see `SourceRecord::Compile`).
pub fn compile_budget() -> f64 {
    setting("VLAD_COMPILE_BUDGET_SECS", 20.0)
}

/// The share of `vlad run`'s compile budget the flow analysis may take (unless
/// `VLAD_ANALYSIS_TIMEOUT_SECS` says otherwise). The analysis of every example takes well
/// under a second, and their C compiler nearly all the budget; an analysis still running after
/// a quarter of it is one that blows up (derivatives nested six or eight deep), whose C would
/// cost far more than the budget anyway.
const ANALYSIS_SHARE: f64 = 0.25;

/// The most memory the flow analysis may take the process to: `VLAD_ANALYSIS_MEMORY_MB`,
/// default half the machine's memory, at most 4 GB (the analysis of every example and test
/// program peaks below 1 GB).
pub fn analysis_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let physical = (pages > 0 && page > 0).then(|| pages as u64 * page as u64);
    let default = physical.map_or(4e9, |p| (p as f64 / 2.0).min(4e9));
    (setting("VLAD_ANALYSIS_MEMORY_MB", default / 1e6) * 1e6) as u64
}

/// Which limit stopped a compilation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Spent {
    /// The CPU time: `seconds`, the limit that `setting` says how to raise.
    Cpu { seconds: f64, setting: &'static str },
    /// The wall-clock time, on a busy machine: not a property of the program.
    Wall { seconds: f64, cpu: f64 },
    /// The memory: `bytes`.
    Memory { bytes: u64 },
}

impl Spent {
    /// The end of the error message: the limit, and how to raise it.
    pub fn explain(&self) -> String {
        match self {
            Spent::Cpu { seconds, setting } => {
                format!(", after {seconds} s ({setting}, in seconds of CPU time)")
            }
            Spent::Wall { seconds, cpu } => format!(
                ", after {seconds:.0} s on a busy machine ({cpu:.1} s of CPU time; the next run \
                 tries again)"
            ),
            Spent::Memory { bytes } => format!(
                ", over {} MB (VLAD_ANALYSIS_MEMORY_MB sets the limit)",
                bytes / 1_000_000
            ),
        }
    }

    /// Whether the next run should make the same decision (not so for the wall clock).
    pub fn lasting(&self) -> bool {
        !matches!(self, Spent::Wall { .. })
    }
}

/// The meter of one compilation: its limits, from the moment it starts.
#[derive(Clone)]
pub struct Meter {
    cpu_start: f64,
    wall_start: Instant,
    cpu_limit: f64,
    cpu_setting: &'static str,
    wall_limit: Duration,
    memory_limit: u64,
    spent: Rc<Cell<Option<Spent>>>,
}

impl Meter {
    /// A meter that allows `seconds` of CPU time (the limit `setting` sets), and memory up to
    /// `analysis_memory`.
    pub fn new(seconds: f64, setting: &'static str) -> Meter {
        Meter {
            cpu_start: cpu_seconds(),
            wall_start: Instant::now(),
            cpu_limit: seconds,
            cpu_setting: setting,
            // A process that gets a tenth of a core: only a safety net, since a busy machine
            // slows the evaluator as much (this project's VM runs at a load of 10 to 20 on two
            // cores for hours, and a limit of three times the CPU limit stopped analyses there
            // that would have finished).
            wall_limit: Duration::from_secs_f64(seconds * 10.0 + 10.0),
            memory_limit: analysis_memory(),
            spent: Rc::new(Cell::new(None)),
        }
    }

    /// The meter of `vlad compile`: the analysis's time limit.
    pub fn analysis() -> Meter {
        Meter::new(
            analysis_seconds(),
            "VLAD_ANALYSIS_TIMEOUT_SECS sets the limit",
        )
    }

    /// The meter of `vlad run` with a compile budget of `budget` CPU seconds: the analysis
    /// gets a share of it, or what `VLAD_ANALYSIS_TIMEOUT_SECS` says.
    pub fn run(budget: f64) -> Meter {
        match analysis_setting() {
            Some(_) => Meter::analysis(),
            None => Meter::new(
                budget * ANALYSIS_SHARE,
                "a quarter of the compile budget, which VLAD_COMPILE_BUDGET_SECS sets",
            ),
        }
    }

    /// CPU seconds used since the meter started.
    pub fn cpu_used(&self) -> f64 {
        cpu_seconds() - self.cpu_start
    }

    /// Which limit has been reached, if one has (remembered: later checks say the same).
    pub fn check(&self) -> Option<Spent> {
        if let Some(s) = self.spent.get() {
            return Some(s);
        }
        let cpu = self.cpu_used();
        let spent = if cpu > self.cpu_limit {
            Some(Spent::Cpu {
                seconds: self.cpu_limit,
                setting: self.cpu_setting,
            })
        } else if self.wall_start.elapsed() > self.wall_limit {
            Some(Spent::Wall {
                seconds: self.wall_limit.as_secs_f64(),
                cpu,
            })
        } else if peak_memory() > self.memory_limit {
            Some(Spent::Memory {
                bytes: self.memory_limit,
            })
        } else {
            None
        };
        self.spent.set(spent);
        spent
    }

    /// What stopped the compilation, if anything did.
    pub fn spent(&self) -> Option<Spent> {
        self.spent.get()
    }

    /// The analysis's budget (`vlad_flow::analysis::Budget`): the message of a limit reached.
    pub fn budget(&self) -> vlad_flow::analysis::Budget {
        let meter = self.clone();
        Rc::new(move || {
            meter.check().map(|s| match s {
                Spent::Memory { .. } => "the flow analysis ran out of memory".to_string(),
                _ => "the flow analysis ran out of time".to_string(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_and_memory_are_measured() {
        let before = cpu_seconds();
        let mut x = 0u64;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        assert!(cpu_seconds() > before);
        assert!(peak_memory() > 1_000_000);
    }

    #[test]
    fn a_meter_stops_at_its_cpu_limit_and_says_so() {
        let m = Meter::new(0.0, "SETTING sets the limit");
        let mut x = 0u64;
        while m.check().is_none() {
            x = x.wrapping_add(1);
        }
        let spent = m.spent().expect("spent");
        assert!(matches!(spent, Spent::Cpu { .. }), "{spent:?}");
        assert!(spent.lasting());
        assert!(spent.explain().contains("SETTING sets the limit"));
        assert_eq!(
            (m.budget())().as_deref(),
            Some("the flow analysis ran out of time")
        );
    }
}
