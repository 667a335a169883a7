//! Settings from the environment, as containers and systemd `Environment=` lines set
//! them.
//!
//! One naming rule: `SHOAL__` followed by the key's path in the file, upper-cased, with
//! `__` between section and key. In `shoal_udp`'s file `socket_workers` is
//! `SHOAL__SOCKET_WORKERS` and `[network] address_ipv4` is
//! `SHOAL__NETWORK__ADDRESS_IPV4`; in the combined `shoal` file, `[udp.network]
//! address_ipv4` is `SHOAL__UDP__NETWORK__ADDRESS_IPV4`. A value is read as TOML when it
//! is valid TOML (`4`, `true`, `["a", "b"]`, `"text"`) and as a string otherwise, so
//! addresses and paths need no quotes; a string that looks like a number needs them
//! (`SHOAL__PRIVILEGES__USER='"1000"'`). The environment wins over the file. A variable
//! that names no key is an error, like a misspelt key in the file.

use anyhow::{Context as _, anyhow, bail};
use shoal_toml_config::Docs;

/// What every override variable starts with.
pub(crate) const PREFIX: &str = "SHOAL__";

/// Sets every `SHOAL__…` variable of `vars` in `table` (a config as TOML, described by
/// `docs`), in name order; returns the names applied.
pub(crate) fn apply(
    table: &mut toml::Table,
    docs: &Docs,
    vars: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<Vec<String>> {
    let mut overrides: Vec<(String, String)> = vars
        .into_iter()
        .filter(|(name, _)| name.starts_with(PREFIX))
        .collect();
    overrides.sort();
    let mut applied = Vec::with_capacity(overrides.len());
    for (name, value) in overrides {
        let path: Vec<String> = name[PREFIX.len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        set(table, docs, &path, parse_value(&value))
            .with_context(|| format!("environment variable {name}"))?;
        applied.push(name);
    }
    Ok(applied)
}

/// The dotted key a variable sets (`SHOAL__UDP__NETWORK__ADDRESS_IPV4` sets
/// `udp.network.address_ipv4`).
pub(crate) fn key_of(name: &str) -> String {
    name.strip_prefix(PREFIX)
        .unwrap_or(name)
        .split("__")
        .map(str::to_ascii_lowercase)
        .collect::<Vec<_>>()
        .join(".")
}

/// The process's environment, as [`apply`] takes it (variables that are not UTF-8
/// cannot be config overrides and are left out).
pub(crate) fn process_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
}

fn set(
    table: &mut toml::Table,
    docs: &Docs,
    path: &[String],
    value: toml::Value,
) -> anyhow::Result<()> {
    let Docs::Struct { fields, .. } = docs else {
        bail!("names a key inside a plain value");
    };
    let Some((key, rest)) = path.split_first() else {
        bail!("names no key");
    };
    let field = fields
        .iter()
        .find(|field| field.key == key)
        .ok_or_else(|| {
            let known: Vec<String> = fields
                .iter()
                .map(|field| field.key.to_ascii_uppercase())
                .collect();
            anyhow!("there is no key {key:?} here (known: {})", known.join(", "))
        })?;
    let is_section = matches!(field.docs, Docs::Struct { .. });
    match (rest.is_empty(), is_section) {
        (true, true) => bail!("{key:?} is a section: name one of its keys after `__`"),
        (true, false) => {
            table.insert(key.clone(), value);
            Ok(())
        }
        (false, false) => bail!("{key:?} is a plain value, not a section"),
        (false, true) => {
            let entry = table
                .entry(key.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let toml::Value::Table(sub) = entry else {
                bail!("{key:?} is not a table in the config");
            };
            set(sub, &field.docs, rest, value)
        }
    }
}

/// `text` as a TOML value when it is one, otherwise as a string.
fn parse_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("value = {text}"))
        .ok()
        .and_then(|mut table| table.remove("value"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use shoal_toml_config::TomlConfig;

    use super::*;

    /// Network.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Network {
        /// Address.
        address: String,
        /// Ports.
        ports: Vec<u16>,
    }

    /// File.
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct File {
        /// Workers.
        workers: u32,
        /// On.
        on: bool,
        /// Network.
        network: Network,
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    fn overridden(list: &[(&str, &str)]) -> anyhow::Result<File> {
        let mut table = toml::Table::try_from(File::default())?;
        apply(&mut table, &File::docs(), vars(list))?;
        Ok(File::deserialize(toml::Value::Table(table))?)
    }

    #[test]
    fn values_are_toml_or_else_strings() {
        let file = overridden(&[
            ("SHOAL__WORKERS", "4"),
            ("SHOAL__ON", "true"),
            ("SHOAL__NETWORK__ADDRESS", "0.0.0.0:6969"),
            ("SHOAL__NETWORK__PORTS", "[1, 2]"),
            ("OTHER", "ignored"),
            ("SHOAL_LOG", "debug"),
        ])
        .expect("applies");
        assert_eq!(file.workers, 4);
        assert!(file.on);
        assert_eq!(file.network.address, "0.0.0.0:6969");
        assert_eq!(file.network.ports, [1, 2]);
        let quoted = overridden(&[("SHOAL__NETWORK__ADDRESS", "\"42\"")]).expect("applies");
        assert_eq!(quoted.network.address, "42");
    }

    #[test]
    fn mistakes_name_the_variable() {
        for (name, value, says) in [
            ("SHOAL__WORKRES", "4", "no key \"workres\""),
            ("SHOAL__NETWORK", "x", "is a section"),
            ("SHOAL__WORKERS__X", "1", "plain value"),
        ] {
            let err = overridden(&[(name, value)]).unwrap_err();
            let text = format!("{err:#}");
            assert!(text.contains(name) && text.contains(says), "{text}");
        }
        let err = overridden(&[("SHOAL__WORKERS", "many")]).unwrap_err();
        assert!(format!("{err:#}").contains("invalid type"), "{err:#}");
    }
}
