//! A tracker binary run as an operator runs it, for the tests that need the real
//! process: its log read line by line, its addresses taken from the log, signals, a
//! clean stop or a kill.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running tracker process; killed (by its PID) when dropped.
#[derive(Debug)]
pub struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    pub log: Vec<String>,
}

impl Process {
    /// Starts `command` with its standard error piped to [`log`](Self::log) (and its
    /// standard output discarded).
    pub fn start(mut command: Command) -> Self {
        command
            .env_remove("SHOAL_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the binary starts");
        let stderr = BufReader::new(child.stderr.take().expect("piped"));
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first line from now on containing `needle`, within `wait`.
    pub fn line_within(&mut self, needle: &str, wait: Duration) -> Option<String> {
        let deadline = Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.log.push(line.clone());
                    if line.contains(needle) {
                        return Some(line);
                    }
                }
                Err(_) => break,
            }
        }
        None
    }

    /// Whether a line read so far (the log up to now) contains `needle`.
    pub fn logged(&self, needle: &str) -> bool {
        self.log.iter().any(|line| line.contains(needle))
    }

    /// The first line from now on containing `needle`, within 20 s; panics with the
    /// log otherwise.
    pub fn line_with(&mut self, needle: &str) -> String {
        match self.line_within(needle, Duration::from_secs(20)) {
            Some(line) => line,
            None => panic!("no log line with {needle:?} in {:#?}", self.log),
        }
    }

    /// The address after `prefix` in the first line from now on that has it
    /// (`listening on http://127.0.0.1:4321/`).
    pub fn address_after(&mut self, prefix: &str) -> SocketAddr {
        let line = self.line_with(prefix);
        let rest = line.split(prefix).nth(1).unwrap_or_default();
        rest.split(['/', ' ', ','])
            .next()
            .and_then(|address| address.parse().ok())
            .unwrap_or_else(|| panic!("no address after {prefix:?} in {line:?}"))
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill takes plain integers; the pid is our own child's.
        let result = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(result, 0, "signal {signal} to {}", self.child.id());
    }

    /// Waits up to `wait` for the process to end; its status if it did.
    pub fn wait_exit(&mut self, wait: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(status) = self.child.try_wait().expect("waitpid") {
                self.drain();
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills it with SIGKILL, as the OOM killer or a watchdog does, and waits.
    pub fn kill(mut self) -> Vec<String> {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
        self.drain();
        std::mem::take(&mut self.log)
    }

    /// Stops it with SIGTERM and checks it exits cleanly within 10 s; returns its log.
    pub fn stop(mut self) -> Vec<String> {
        self.signal(libc::SIGTERM);
        match self.wait_exit(Duration::from_secs(10)) {
            Some(status) => assert!(status.success(), "{status:?}: {:#?}", self.log),
            None => panic!("no exit within 10 s of SIGTERM: {:#?}", self.log),
        }
        std::mem::take(&mut self.log)
    }

    /// Reads what the process wrote until its standard error closes (it has ended).
    fn drain(&mut self) {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.log.push(line);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
