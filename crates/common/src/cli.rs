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
pub enum Command {
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

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut config = None;
    let (mut print_default, mut print_effective) = (false, false);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy();
        match text.as_ref() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-p" | "--print-default-config" => print_default = true,
            "-P" | "--print-config" => print_effective = true,
            "-c" | "--config" => {
                let file = args
                    .next()
                    .ok_or_else(|| format!("{text} needs a file name"))?;
                if config.replace(PathBuf::from(file)).is_some() {
                    return Err("only one config file may be given".into());
                }
            }
            other => {
                if let Some(file) = other.strip_prefix("--config=") {
                    if config.replace(PathBuf::from(file)).is_some() {
                        return Err("only one config file may be given".into());
                    }
                } else {
                    return Err(format!("unexpected argument {other:?}"));
                }
            }
        }
    }
    match (print_default, print_effective) {
        (true, true) => Err("-p and -P cannot be combined".into()),
        (true, false) if config.is_some() => {
            Err("-p prints the built-in defaults; use -P to print the config loaded with -c".into())
        }
        (true, false) => Ok(Command::PrintDefault),
        (false, true) => Ok(Command::PrintEffective { config }),
        (false, false) => Ok(Command::Run { config }),
    }
}

/// The usage text.
pub fn usage(app: &AppInfo) -> String {
    format!(
        "{name} {version}: {about}

Usage: {name} [OPTIONS]

Options:
  -c, --config FILE            Load the configuration from FILE (TOML). Keys left
                               out keep their defaults.
  -p, --print-default-config   Print the default configuration with every key
                               documented, then exit. Start a config file with
                               `{name} -p > {name}.toml`.
  -P, --print-config           Print the configuration that would be used (the
                               defaults plus FILE), then exit.
  -V, --version                Print the version and exit.
  -h, --help                   Print this help and exit.

With no options, {name} runs with the built-in defaults.
Environment: SHOAL__SECTION__KEY=value overrides a key of the file (e.g.
SHOAL__NETWORK__ADDRESS_IPV4=0.0.0.0:6969); SHOAL_LOG=LEVEL or
SHOAL_LOG=info,module=debug overrides the log level.
Signals: SIGTERM/SIGINT shut down; SIGUSR1 reloads the access list.
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
#[allow(clippy::print_stdout)] // printing configs and help is the point
pub fn run_cli_with_args<C: TrackerConfig>(
    app: &AppInfo,
    args: impl IntoIterator<Item = OsString>,
    run: impl FnOnce(C) -> anyhow::Result<()>,
) -> ExitCode {
    let command = match parse_args(args) {
        Ok(command) => command,
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
            print!("{}", usage(app));
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
    let loaded =
        config::load_effective::<C>(config_file.as_deref(), crate::env_overrides::process_vars());
    let config = match loaded {
        Ok(config) => config,
        Err(err) => {
            logging::print_error(&format!("{}: {err:#}", app.name));
            return ExitCode::FAILURE;
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
    match run(config) {
        Ok(()) => {
            log::info!("{} stopped", app.name);
            ExitCode::SUCCESS
        }
        Err(err) => {
            log::error!("{err:#}");
            logging::print_error(&format!("{}: {err:#}", app.name));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        parse_args(args.iter().map(OsString::from))
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
    }
}
