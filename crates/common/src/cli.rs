//! The command line every shoal binary shares, and its start-up sequence.
//!
//! ```text
//! shoal_udp [-c FILE] [-p | -P] [-V] [-h]
//! ```
//!
//! Exit status: 0 after a clean shutdown or a print; 1 when the config is invalid or
//! the tracker fails; 2 for a command-line mistake.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

/// The exit status of a run that never served: the config could not be loaded, or a
/// tracker could not start from it (a file it cannot read, an address it cannot
/// bind). EX_CONFIG of sysexits.h: the shipped units do not restart on it
/// (`RestartPreventExitStatus=78`), since a restart finds the same config; a failure
/// after serving began exits 1, which they restart on.
pub const EXIT_NOT_STARTED: u8 = 78;

/// Context on the error of a run that failed before it served (see
/// [`EXIT_NOT_STARTED`]).
#[derive(Debug, Clone, Copy)]
pub struct NotStarted;

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("could not start")
    }
}

use crate::config::{self, TrackerConfig};
use crate::logging;

/// What a binary says about itself in `--help` and `--version`.
#[derive(Clone, Copy, Debug)]
pub struct AppInfo {
    /// The command name, e.g. `shoal_udp`.
    pub name: &'static str,
    /// The version, usually `env!("CARGO_PKG_VERSION")`.
    pub version: &'static str,
    /// One line on what it is.
    pub about: &'static str,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// Run with the defaults, or with the given file on top of them.
    Run {
        /// `-c FILE`.
        config: Option<PathBuf>,
    },
    /// `-p`: print the default config, commented.
    PrintDefault,
    /// `-P`: print the effective config (defaults plus the file), commented.
    PrintEffective {
        /// `-c FILE`.
        config: Option<PathBuf>,
    },
    /// `-h`.
    Help,
    /// `-V`.
    Version,
}

/// A flag a binary adds to the shared command line (a load tester's `--json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraFlag {
    /// Its long name, without the dashes.
    pub long: &'static str,
    /// One line for `--help`.
    pub help: &'static str,
}

/// Parses the arguments after the program name, taking `extras` too; returns the
/// extra flags given, by long name.
pub(crate) fn parse_args_with(
    args: impl IntoIterator<Item = OsString>,
    extras: &[ExtraFlag],
) -> Result<(Command, Vec<&'static str>), String> {
    use lexopt::Arg::{Long, Short, Value};

    let mut config = None;
    let (mut print_default, mut print_effective) = (false, false);
    let mut given = Vec::new();
    let mut parser = lexopt::Parser::from_args(args);
    while let Some(arg) = parser.next().map_err(|err| err.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok((Command::Help, given)),
            Short('V') | Long("version") => return Ok((Command::Version, given)),
            Short('p') | Long("print-default-config") => print_default = true,
            Short('P') | Long("print-config") => print_effective = true,
            Short('c') | Long("config") => {
                let file = parser
                    .value()
                    .map_err(|_| "-c needs a file name".to_string())?;
                if config.replace(PathBuf::from(file)).is_some() {
                    return Err("only one config file may be given".into());
                }
            }
            Long(name) => match extras.iter().find(|extra| extra.long == name) {
                Some(extra) if !given.contains(&extra.long) => given.push(extra.long),
                Some(_) => {}
                None => return Err(format!("unexpected argument \"--{name}\"")),
            },
            Short(other) => return Err(format!("unexpected argument \"-{other}\"")),
            Value(value) => {
                return Err(format!("unexpected argument {:?}", value.to_string_lossy()));
            }
        }
    }
    let command = match (print_default, print_effective) {
        (true, true) => return Err("-p and -P cannot be combined".into()),
        (true, false) if config.is_some() => {
            return Err(
                "-p prints the built-in defaults; use -P to print the config loaded with -c".into(),
            );
        }
        (true, false) => Command::PrintDefault,
        (false, true) => Command::PrintEffective { config },
        (false, false) => Command::Run { config },
    };
    Ok((command, given))
}

/// What SIGUSR1 and SIGHUP reload, for every binary's help.
pub const RELOAD_SIGNALS_HELP: &str = "Signals: SIGTERM/SIGINT shut down; SIGUSR1 or SIGHUP \
(systemctl reload) reloads what is read from files: access lists, TLS certificates, \
private mode's users and torrents files, WebTorrent Origin rules.";

/// The top-level sections of config `C`, as `[name]`, in the order `-p` prints them:
/// for help texts, so that they name every section there is.
pub fn config_sections<C: TrackerConfig>() -> Vec<String> {
    toml::Table::try_from(C::default())
        .map(|table| {
            table
                .iter()
                .filter(|(_, value)| value.is_table())
                .map(|(name, _)| format!("[{name}]"))
                .collect()
        })
        .unwrap_or_default()
}

/// `text` as lines that start at column `indent` (the first one is already there;
/// the others are indented with spaces) and end by column 79; words are not split.
pub fn wrap(text: &str, indent: usize) -> String {
    const WIDTH: usize = 79;
    let mut out = String::new();
    let mut column = indent;
    let mut first = true;
    for word in text.split_whitespace() {
        if !first && column + 1 + word.len() > WIDTH {
            out.push('\n');
            out.push_str(&" ".repeat(indent));
            column = indent;
        } else if !first {
            out.push(' ');
            column += 1;
        }
        out.push_str(word);
        column += word.len();
        first = false;
    }
    out
}

/// The usage text of a binary whose config has `sections` and that adds `extras`.
pub(crate) fn usage_with(app: &AppInfo, extras: &[ExtraFlag], sections: &[String]) -> String {
    let sections = wrap(
        &format!(
            "Load the configuration from FILE (TOML): {}. Keys left out keep their defaults.",
            sections.join(", ")
        ),
        31,
    );
    let signals = wrap(RELOAD_SIGNALS_HELP, 0);
    let extra_lines: String = extras
        .iter()
        .map(|extra| format!("      --{:<23}{}\n", extra.long, extra.help))
        .collect();
    format!(
        "{name} {version}: {about}

Usage: {name} [OPTIONS]

Options:
  -c, --config FILE            {sections}
  -p, --print-default-config   Print the default configuration with every key
                               documented, then exit. Start a config file with
                               `{name} -p > {name}.toml`.
  -P, --print-config           Print the configuration that would be used (the
                               defaults plus FILE), then exit.
{extra_lines}  -V, --version                Print the version and exit.
  -h, --help                   Print this help and exit.

With no options, {name} runs with the built-in defaults.
Environment: SHOAL__SECTION__KEY=value overrides a key of the file (e.g.
SHOAL__NETWORK__ADDRESS_IPV4=0.0.0.0:6969); SHOAL_LOG=LEVEL or
SHOAL_LOG=info,module=debug overrides the log level.
{signals}
",
        name = app.name,
        version = app.version,
        about = app.about,
    )
}

/// Parses the process arguments and runs `run` with the resulting config.
pub fn run_cli<C: TrackerConfig>(
    app: &AppInfo,
    run: impl FnOnce(C) -> anyhow::Result<()>,
) -> ExitCode {
    run_cli_with_args(app, std::env::args_os().skip(1), run)
}

/// [`run_cli`] with explicit arguments (those after the program or subcommand name).
pub fn run_cli_with_args<C: TrackerConfig>(
    app: &AppInfo,
    args: impl IntoIterator<Item = OsString>,
    run: impl FnOnce(C) -> anyhow::Result<()>,
) -> ExitCode {
    run_cli_with_flags(app, &[], args, |config, _| run(config))
}

/// [`run_cli_with_args`] for a binary that adds `extras` to the command line; `run`
/// gets the extra flags given, by long name.
#[allow(clippy::print_stdout)] // printing configs and help is the point
pub fn run_cli_with_flags<C: TrackerConfig>(
    app: &AppInfo,
    extras: &[ExtraFlag],
    args: impl IntoIterator<Item = OsString>,
    run: impl FnOnce(C, &[&'static str]) -> anyhow::Result<()>,
) -> ExitCode {
    let (command, flags) = match parse_args_with(args, extras) {
        Ok(parsed) => parsed,
        Err(problem) => {
            logging::print_error(&format!(
                "{}: {problem}\nRun `{} --help` for usage.",
                app.name, app.name
            ));
            return ExitCode::from(2);
        }
    };
    let config_file = match &command {
        Command::Help => {
            print!("{}", usage_with(app, extras, &config_sections::<C>()));
            return ExitCode::SUCCESS;
        }
        Command::Version => {
            println!("{} {}", app.name, app.version);
            return ExitCode::SUCCESS;
        }
        Command::PrintDefault => {
            print!("{}", config::to_toml(&C::default()));
            return ExitCode::SUCCESS;
        }
        Command::Run { config } | Command::PrintEffective { config } => config.clone(),
    };
    // Root reads every file: the files are checked for the user the tracker will run
    // as too (after dropping privileges, or under the packaged units for -P).
    let printing = matches!(command, Command::PrintEffective { .. });
    let mut checked_for = None;
    let loaded = config::load_effective_with::<C>(
        config_file.as_deref(),
        crate::env_overrides::process_vars(),
        |config| {
            if let Some(user) = config
                .privileges()
                .and_then(|privileges| crate::privileges::file_user(privileges, printing))
            {
                checked_for = Some(user.name.clone());
                crate::files::check_files_for(user);
            }
        },
    );
    let config = match loaded {
        Ok(config) => config,
        Err(err) => {
            let checked_for = checked_for.map_or(String::new(), |name| {
                format!("\n(files checked for this process and for user {name}, whom the tracker runs as)")
            });
            logging::print_error(&format!("{}: {err:#}{checked_for}", app.name));
            return ExitCode::from(EXIT_NOT_STARTED);
        }
    };
    if let Command::PrintEffective { .. } = command {
        for notice in config.notices() {
            logging::print_error(&format!("{}: warning: {notice}", app.name));
        }
        print!("{}", config::to_toml(&config));
        return ExitCode::SUCCESS;
    }
    logging::init(&config.logging());
    log::info!("{} {} starting", app.name, app.version);
    for notice in config.notices() {
        log::warn!("config: {notice}");
    }
    match run(config, &flags) {
        Ok(()) => {
            log::info!("{} stopped", app.name);
            ExitCode::SUCCESS
        }
        Err(err) => {
            // Once: the logger writes to stderr too (printing it as well showed every
            // fatal error twice); plainly only when the log level hides errors.
            if log::log_enabled!(log::Level::Error) {
                log::error!("{err:#}");
            } else {
                logging::print_error(&format!("{}: {err:#}", app.name));
            }
            if err.downcast_ref::<NotStarted>().is_some() {
                ExitCode::from(EXIT_NOT_STARTED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// For a command that reads the config but runs no tracker (`shoal health`, `shoal
/// check-host`): parses `-c FILE`, `-h` and `-V`, and loads the effective config (the
/// file and the `SHOAL__` variables) without starting the log. `Err` carries the exit
/// status for what was already printed (help, version, a mistake).
#[allow(clippy::print_stdout)] // help and version go to stdout
pub fn load_cli_config<C: TrackerConfig>(
    app: &AppInfo,
    usage: &str,
    args: impl IntoIterator<Item = OsString>,
) -> Result<C, ExitCode> {
    let command = match parse_args_with(args, &[]) {
        Ok((Command::Run { config }, _)) => config,
        Ok((Command::Help, _)) => {
            print!("{usage}");
            return Err(ExitCode::SUCCESS);
        }
        Ok((Command::Version, _)) => {
            println!("{} {}", app.name, app.version);
            return Err(ExitCode::SUCCESS);
        }
        Ok((Command::PrintDefault | Command::PrintEffective { .. }, _)) => {
            logging::print_error(&format!(
                "{}: -p and -P belong to the trackers, not to this command",
                app.name
            ));
            return Err(ExitCode::from(2));
        }
        Err(problem) => {
            logging::print_error(&format!(
                "{}: {problem}\nRun `{} --help` for usage.",
                app.name, app.name
            ));
            return Err(ExitCode::from(2));
        }
    };
    config::load_effective::<C>(command.as_deref(), crate::env_overrides::process_vars()).map_err(
        |err| {
            logging::print_error(&format!("{}: {err:#}", app.name));
            ExitCode::FAILURE
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args_with(args.iter().map(OsString::from), &[]).map(|(command, _)| command)
    }

    #[test]
    fn options_are_parsed() {
        assert_eq!(parse(&[]), Ok(Command::Run { config: None }));
        assert_eq!(
            parse(&["-c", "a.toml"]),
            Ok(Command::Run {
                config: Some("a.toml".into())
            })
        );
        assert_eq!(
            parse(&["--config=a.toml"]),
            Ok(Command::Run {
                config: Some("a.toml".into())
            })
        );
        assert_eq!(parse(&["-p"]), Ok(Command::PrintDefault));
        assert_eq!(
            parse(&["-c", "a.toml", "-P"]),
            Ok(Command::PrintEffective {
                config: Some("a.toml".into())
            })
        );
        assert_eq!(parse(&["-P"]), Ok(Command::PrintEffective { config: None }));
        assert_eq!(parse(&["--version"]), Ok(Command::Version));
        assert_eq!(parse(&["-c", "x", "-h"]), Ok(Command::Help));
    }

    #[test]
    fn mistakes_are_explained() {
        assert_eq!(parse(&["-c"]), Err("-c needs a file name".into()));
        assert_eq!(parse(&["-x"]), Err("unexpected argument \"-x\"".into()));
        assert!(
            parse(&["-p", "-P"])
                .unwrap_err()
                .contains("cannot be combined")
        );
        assert!(parse(&["-p", "-c", "a"]).unwrap_err().contains("use -P"));
        assert!(
            parse(&["-c", "a", "-c", "b"])
                .unwrap_err()
                .contains("only one")
        );
        assert_eq!(
            parse(&["a.toml"]),
            Err("unexpected argument \"a.toml\"".into())
        );
        assert_eq!(
            parse(&["--json"]),
            Err("unexpected argument \"--json\"".into())
        );
    }

    const JSON: ExtraFlag = ExtraFlag {
        long: "json",
        help: "Print JSON.",
    };

    #[test]
    fn a_value_is_a_value_even_when_it_looks_like_a_flag() {
        let args = ["-c", "--json"].map(OsString::from);
        let (command, flags) = parse_args_with(args, &[JSON]).unwrap();
        assert_eq!(
            command,
            Command::Run {
                config: Some("--json".into())
            }
        );
        assert!(flags.is_empty());
        let args = ["--config=x.toml", "--json", "--json"].map(OsString::from);
        let (command, flags) = parse_args_with(args, &[JSON]).unwrap();
        assert_eq!(
            command,
            Command::Run {
                config: Some("x.toml".into())
            }
        );
        assert_eq!(flags, ["json"]);
        assert_eq!(
            parse(&["-cx.toml"]),
            Ok(Command::Run {
                config: Some("x.toml".into())
            })
        );
    }

    #[test]
    fn extra_flags_are_in_the_usage() {
        let app = AppInfo {
            name: "t",
            version: "0",
            about: "a test",
        };
        assert!(
            usage_with(&app, &[JSON], &[]).contains("      --json                   Print JSON.\n")
        );
        assert!(!usage_with(&app, &[], &[]).contains("--json"));
        let sections = ["[logging]".to_owned(), "[network]".to_owned()];
        let usage = usage_with(&app, &[], &sections);
        let flowing = usage.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flowing.contains("(TOML): [logging], [network]."), "{usage}");
        assert!(
            usage.lines().all(|line| line.chars().count() <= 79),
            "{usage}"
        );
    }
}
