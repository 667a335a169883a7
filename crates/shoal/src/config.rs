//! The combined `shoal` file: the process's sections once, and one section per tracker
//! with every key the tracker's own binary takes, plus `enabled`.

use serde::{Deserialize, Serialize};
use shoal_common::{Both, Problems, ProcessAnd, TrackerConfig};
use shoal_toml_config::TomlConfig;

/// Whether a tracker runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Switch {
    /// Run this tracker in the process.
    pub enabled: bool,
}

impl Default for Switch {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// One tracker's section: `enabled` and the tracker's keys.
pub(crate) type Section<C> = Both<Switch, C>;

/// A section's two sides by what they are.
pub(crate) trait SectionParts<C> {
    /// Whether the tracker runs.
    fn enabled(&self) -> bool;
    /// The tracker's keys.
    fn tracker(&self) -> &C;
    /// The tracker's keys, taken out.
    fn into_tracker(self) -> C;
}

impl<C> SectionParts<C> for Section<C> {
    fn enabled(&self) -> bool {
        self.first.enabled
    }

    fn tracker(&self) -> &C {
        &self.second
    }

    fn into_tracker(self) -> C {
        self.second
    }
}

/// shoal: the UDP, HTTP(S) and WebTorrent trackers in one process.
///
/// Every key is optional; a key left out keeps the default shown here. Durations are
/// in seconds, sizes in bytes. Each tracker's section takes the keys its own binary
/// takes (`shoal_udp -p`, `shoal_http -p`, `shoal_ws -p`) except logging, metrics and
/// privileges, which belong to the process and are set once. Any key can also be set
/// from the environment: SHOAL__ and its path in upper case, sections joined by `__`,
/// e.g. SHOAL__UDP__NETWORK__ADDRESS_IPV4=0.0.0.0:6969 or SHOAL__WS__ENABLED=false.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Trackers {
    /// The UDP tracker (BEP 15).
    pub udp: Section<shoal_udp::Config>,
    /// The HTTP and HTTPS tracker (BEP 3, 7, 23, 48). It may share the UDP tracker's
    /// port number: one is UDP, the other TCP.
    pub http: Section<shoal_http::Config>,
    /// The WebTorrent tracker (ws and wss).
    pub ws: Section<shoal_ws::Config>,
}

impl TrackerConfig for Trackers {
    fn validate(&self, problems: &mut Problems) {
        problems.check(
            self.udp.enabled() || self.http.enabled() || self.ws.enabled(),
            "enabled",
            "every tracker is disabled: enable at least one of udp, http and ws",
        );
        if self.udp.enabled() {
            problems.section("udp", |p| self.udp.tracker().validate(p));
        }
        if self.http.enabled() {
            problems.section("http", |p| self.http.tracker().validate(p));
        }
        if self.ws.enabled() {
            problems.section("ws", |p| self.ws.tracker().validate(p));
        }
    }

    fn snapshot_directories(&self) -> Vec<(String, std::path::PathBuf)> {
        let mut found = Vec::new();
        for (name, enabled, directories) in [
            (
                "udp",
                self.udp.enabled(),
                self.udp.tracker().snapshot_directories(),
            ),
            (
                "http",
                self.http.enabled(),
                self.http.tracker().snapshot_directories(),
            ),
            (
                "ws",
                self.ws.enabled(),
                self.ws.tracker().snapshot_directories(),
            ),
        ] {
            if enabled {
                found.extend(
                    directories
                        .into_iter()
                        .map(|(key, path)| (format!("{name}.{key}"), path)),
                );
            }
        }
        found
    }
}

/// The whole `shoal` file.
pub(crate) type ShoalConfig = ProcessAnd<Trackers>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_file_parses_back_and_names_every_section() {
        let printed = shoal_common::config_to_toml(&ShoalConfig::default());
        for header in [
            "[logging]",
            "[metrics]",
            "[privileges]",
            "[udp]",
            "[udp.network]",
            "[http.network]",
            "[ws.limits]",
        ] {
            assert!(printed.contains(header), "{header} missing:\n{printed}");
        }
        let parsed: ShoalConfig = shoal_common::parse_config(&printed).expect("valid");
        assert_eq!(parsed, ShoalConfig::default());
    }

    #[test]
    fn trackers_can_be_disabled_but_not_all() {
        let config: ShoalConfig =
            shoal_common::parse_config("[udp]\nenabled = false\n[ws]\nenabled = false\n")
                .expect("valid");
        assert!(!config.tracker().udp.enabled() && config.tracker().http.enabled());
        let err = shoal_common::parse_config::<ShoalConfig>(
            "[udp]\nenabled = false\n[http]\nenabled = false\n[ws]\nenabled = false\n",
        )
        .unwrap_err();
        assert!(
            format!("{err:#}").contains("enable at least one"),
            "{err:#}"
        );
    }

    #[test]
    fn a_disabled_tracker_is_not_checked_and_mistakes_name_their_section() {
        let config = "[udp]\nenabled = false\n[udp.protocol]\nannounce_interval = 0\n";
        shoal_common::parse_config::<ShoalConfig>(config)
            .expect("a disabled tracker is not checked");
        let err =
            shoal_common::parse_config::<ShoalConfig>("[udp.protocol]\nannounce_interval = 0\n")
                .unwrap_err();
        assert!(
            format!("{err:#}").contains("udp.protocol.announce_interval"),
            "{err:#}"
        );
        let err =
            shoal_common::parse_config::<ShoalConfig>("[http]\nsocket_wrokers = 2\n").unwrap_err();
        assert!(format!("{err:#}").contains("socket_wrokers"), "{err:#}");
    }

    #[test]
    fn the_environment_reaches_tracker_sections() {
        let config: ShoalConfig = shoal_common::load_config_effective(
            None,
            [
                ("SHOAL__WS__ENABLED".to_string(), "false".to_string()),
                (
                    "SHOAL__UDP__NETWORK__ADDRESS_IPV4".to_string(),
                    "127.0.0.1:7000".to_string(),
                ),
                ("SHOAL__LOGGING__LEVEL".to_string(), "debug".to_string()),
            ],
        )
        .expect("valid");
        assert!(!config.tracker().ws.enabled());
        assert_eq!(
            config.tracker().udp.tracker().network.address_ipv4,
            "127.0.0.1:7000".parse().unwrap()
        );
        assert_eq!(
            config.process().logging.level,
            shoal_common::LogLevel::Debug
        );
    }

    #[test]
    fn bad_values_are_blamed_on_where_they_came_from() {
        let file = std::env::temp_dir().join(format!("shoal-blame-{}.toml", std::process::id()));
        std::fs::write(&file, "[udp.protocol]\nannounce_interval = 1800\n").unwrap();
        let load = |vars: &[(&str, &str)]| {
            let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            format!(
                "{:#}",
                shoal_common::load_config_effective::<ShoalConfig>(Some(&file), vars).unwrap_err()
            )
        };
        let env_only = load(&[("SHOAL__UDP__PROTOCOL__MAX_PEERS", "0")]);
        assert!(
            env_only.starts_with("with SHOAL__UDP__PROTOCOL__MAX_PEERS from the environment: ")
                && env_only.contains("(set by SHOAL__UDP__PROTOCOL__MAX_PEERS)")
                && !env_only.contains("in config file"),
            "{env_only}"
        );
        std::fs::write(&file, "[udp.protocol]\nannounce_interval = 0\n").unwrap();
        let both = load(&[("SHOAL__UDP__PROTOCOL__MAX_PEERS", "0")]);
        assert!(
            both.contains("in config file") && both.contains("and the environment: 2 invalid"),
            "{both}"
        );
        let file_only = load(&[]);
        assert!(
            file_only.contains("in config file") && !file_only.contains("environment"),
            "{file_only}"
        );
        std::fs::remove_file(&file).unwrap();
    }

    #[test]
    fn a_variable_of_the_wrong_type_is_named_in_one_line_with_its_key() {
        let load = |vars: &[(&str, &str)]| {
            let vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            format!(
                "{:#}",
                shoal_common::load_config_effective::<ShoalConfig>(None, vars).unwrap_err()
            )
        };
        let address = load(&[
            ("SHOAL__UDP__NETWORK__ADDRESS_IPV4", "nonsense"),
            ("SHOAL__UDP__SWARM_WORKERS", "2"),
        ]);
        assert_eq!(
            address,
            "environment variable SHOAL__UDP__NETWORK__ADDRESS_IPV4 \
             (udp.network.address_ipv4): invalid socket address syntax"
        );
        let secret = load(&[("SHOAL__HTTP__CLUSTER__PASSWORD", "1")]);
        assert!(!secret.contains('\n'), "{secret}");
        // A default made invalid by a variable is the variable's doing.
        let private = load(&[("SHOAL__UDP__PRIVATE__ENABLED", "true")]);
        assert!(
            private.starts_with("with SHOAL__UDP__PRIVATE__ENABLED from the environment: "),
            "{private}"
        );
    }

    /// Every TOML example in README.md and documents/ has keys that exist, with values
    /// of their types: an example for the combined binary (one that names
    /// /etc/shoal/shoal.toml or has [udp…], [http…] or [ws…] sections) is read as its
    /// config, any other as a single tracker's file, which at least one tracker takes.
    #[test]
    fn the_documents_toml_examples_have_keys_that_exist() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = vec![root.join("README.md")];
        for entry in std::fs::read_dir(root.join("documents")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|ext| ext == "md") {
                files.push(path);
            }
        }
        let mut checked = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (start, lines) in shoal_common::testing::markdown_blocks(&text, "toml") {
                let block = lines.join("\n") + "\n";
                let whole = block
                    .lines()
                    .next()
                    .is_some_and(|first| first.contains("/etc/shoal/shoal.toml"))
                    || block.lines().any(|line| {
                        ["[udp", "[http", "[ws"]
                            .iter()
                            .any(|prefix| line.starts_with(prefix))
                    });
                let read = if whole {
                    shoal_common::parse_config_keys::<ShoalConfig>(&block).map(|_| ())
                } else {
                    shoal_common::parse_config_keys::<shoal_udp::File>(&block)
                        .map(|_| ())
                        .or_else(|_| {
                            shoal_common::parse_config_keys::<shoal_http::File>(&block).map(|_| ())
                        })
                        .or_else(|_| {
                            shoal_common::parse_config_keys::<shoal_ws::File>(&block).map(|_| ())
                        })
                };
                if let Err(err) = read {
                    panic!("{}:{}: {err:#}\n{block}", file.display(), start);
                }
                checked += 1;
            }
        }
        assert!(checked >= 12, "{checked} TOML examples");
        // What it catches: a misspelt key, a value of another type.
        assert!(
            shoal_common::parse_config_keys::<ShoalConfig>("[udp.private]\nenabld = true\n")
                .is_err()
        );
        assert!(
            shoal_common::parse_config_keys::<shoal_http::File>("[network]\nuse_ipv6 = 1\n")
                .is_err()
        );
    }

    #[test]
    fn snapshots_and_a_chroot_do_not_go_together() {
        let directory = std::env::temp_dir();
        let text = format!(
            "[privileges]\ndrop_privileges = true\nchroot = true\nchroot_path = \"/var/empty\"\n\
             user = \"nobody\"\n[udp.state]\ndirectory = \"{}\"\n",
            directory.display()
        );
        let message = shoal_common::parse_config::<ShoalConfig>(&text)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("udp.state.directory") && message.contains("chroot"),
            "{message}"
        );
        // Either alone is fine.
        let text = text.replace("chroot = true", "chroot = false");
        shoal_common::parse_config::<ShoalConfig>(&text).expect("valid");
    }
}
