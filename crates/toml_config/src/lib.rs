//! Commented TOML from doc comments.
//!
//! Config types derive [`TomlConfig`] next to serde's derives. The derive records the
//! doc comment of every field, and [`to_commented_toml`] prints a value of the type as
//! TOML with each key preceded by its comment. Printing the default value gives the
//! file operators get from `-p`; printing a loaded value gives `-P`. Because the text
//! comes from the same doc comments rustdoc shows, the documentation is written once.
//!
//! Leaf types (numbers, strings, paths, addresses…) implement [`TomlConfig`] here with
//! [`Docs::Leaf`]; enums of unit variants derive it and get their choices listed.

use std::fmt::Write as _;

// Lets the derive's `::shoal_toml_config::…` paths resolve inside this crate's own tests.
#[cfg(test)]
extern crate self as shoal_toml_config;

use serde::Serialize;

pub use shoal_toml_config_derive::TomlConfig;

/// A type that can describe its own TOML documentation.
pub trait TomlConfig {
    /// The documentation tree of this type.
    fn docs() -> Docs;
}

/// Documentation of one config type.
#[derive(Debug)]
pub enum Docs {
    /// A plain value: the field's own doc comment says everything.
    Leaf,
    /// A table with documented keys, printed in declaration order.
    Struct {
        /// The type's own doc comment (or what `#[toml_config(about = …)]` made).
        doc: std::borrow::Cow<'static, str>,
        /// One entry per field.
        fields: Vec<FieldDoc>,
    },
    /// A value chosen from a fixed set (an enum of unit variants).
    Choice {
        /// The type's own doc comment.
        doc: &'static str,
        /// One entry per variant.
        choices: Vec<ChoiceDoc>,
    },
}

/// Documentation of one key of a table.
#[derive(Debug)]
pub struct FieldDoc {
    /// The TOML key.
    pub key: &'static str,
    /// The field's doc comment.
    pub doc: &'static str,
    /// Documentation of the field's type.
    pub docs: Docs,
}

/// Documentation of one allowed value of a [`Docs::Choice`].
#[derive(Debug)]
pub struct ChoiceDoc {
    /// The value as it is written in TOML.
    pub value: String,
    /// The variant's doc comment.
    pub doc: &'static str,
}

/// The text serde gives a unit enum variant, e.g. `"allow"` for `Mode::Allow` under
/// `rename_all = "lowercase"`.
pub fn serialized_name<T: Serialize>(value: &T) -> String {
    match toml::Value::try_from(value) {
        Ok(toml::Value::String(name)) => name,
        Ok(other) => other.to_string(),
        Err(err) => format!("<unserializable: {err}>"),
    }
}

macro_rules! leaf {
    ($($ty:ty),* $(,)?) => {
        $(impl TomlConfig for $ty {
            fn docs() -> Docs {
                Docs::Leaf
            }
        })*
    };
}

leaf!(
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    String,
    std::path::PathBuf,
    std::net::IpAddr,
    std::net::Ipv4Addr,
    std::net::Ipv6Addr,
    std::net::SocketAddr,
    std::net::SocketAddrV4,
    std::net::SocketAddrV6,
);

impl<T> TomlConfig for Vec<T> {
    fn docs() -> Docs {
        Docs::Leaf
    }
}

impl<T> TomlConfig for Option<T> {
    fn docs() -> Docs {
        Docs::Leaf
    }
}

/// Prints `value` as TOML in which every key is preceded by its doc comment.
///
/// The output parses back into an equal value (see the round-trip tests of every
/// config type in the workspace).
pub fn to_commented_toml<T: TomlConfig + Serialize>(value: &T) -> Result<String, toml::ser::Error> {
    let table = toml::Table::try_from(value)?;
    let docs = T::docs();
    let mut out = String::new();
    if let Docs::Struct { doc, .. } = &docs {
        write_comment(&mut out, doc);
        if !doc.is_empty() {
            out.push('\n');
        }
    }
    write_table(&mut out, &mut Vec::new(), &table, &docs);
    // Exactly one trailing newline.
    let trimmed = out.trim_end().len();
    out.truncate(trimmed);
    out.push('\n');
    Ok(out)
}

fn write_table<'a>(out: &mut String, path: &mut Vec<&'a str>, table: &toml::Table, docs: &'a Docs) {
    let Docs::Struct { fields, .. } = docs else {
        // Not a documented table: fall back to plain TOML for its contents.
        out.push_str(&table.to_string());
        return;
    };

    // TOML requires plain keys before sub-tables, so sub-tables are written last.
    let mut sub_tables = Vec::new();
    for field in fields {
        let Some(value) = table.get(field.key) else {
            continue; // e.g. an Option that is None
        };
        if let (toml::Value::Table(sub), Docs::Struct { .. }) = (value, &field.docs) {
            sub_tables.push((field, sub));
            continue;
        }
        write_comment(out, field.doc);
        write_choices(out, &field.docs);
        let _ = writeln!(out, "{} = {}\n", field.key, value);
    }
    // Keys the docs do not know (cannot happen for derived types, but never drop data).
    for (key, value) in table {
        if !fields.iter().any(|field| field.key == key) {
            let _ = writeln!(out, "{key} = {value}\n");
        }
    }
    for (field, sub) in sub_tables {
        path.push(field.key);
        write_comment(out, field.doc);
        let _ = writeln!(out, "[{}]", path.join("."));
        write_table(out, path, sub, &field.docs);
        path.pop();
    }
}

fn write_comment(out: &mut String, doc: &str) {
    for line in doc.lines() {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            let _ = writeln!(out, "# {line}");
        }
    }
}

fn write_choices(out: &mut String, docs: &Docs) {
    let Docs::Choice { choices, .. } = docs else {
        return;
    };
    out.push_str("#\n# One of:\n");
    for choice in choices {
        let mut lines = choice.doc.lines();
        let first = lines.next().unwrap_or("");
        let _ = writeln!(out, "#   \"{}\": {}", choice.value, first);
        for line in lines {
            let _ = writeln!(out, "#       {line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    /// How loud to be.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
    #[serde(rename_all = "lowercase")]
    enum Volume {
        /// Say nothing.
        Quiet,
        /// Say everything,
        /// twice.
        Loud,
    }

    /// Inner section.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Inner {
        /// Port to use.
        port: u16,
        /// Names, in order.
        names: Vec<String>,
        /// Deeper still.
        deeper: Deeper,
    }

    /// Deeper section.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Deeper {
        /// A flag.
        flag: bool,
    }

    /// Top-level test config.
    ///
    /// Second paragraph.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, TomlConfig)]
    #[serde(default, deny_unknown_fields)]
    struct Outer {
        /// A name with "quotes" and a \ backslash.
        name: String,
        /// The inner section.
        inner: Inner,
        /// How loud.
        volume: Volume,
        /// A ratio.
        ratio: f64,
    }

    impl Default for Deeper {
        fn default() -> Self {
            Self { flag: true }
        }
    }

    impl Default for Inner {
        fn default() -> Self {
            Self {
                port: 6969,
                names: vec!["a".into(), "b".into()],
                deeper: Deeper::default(),
            }
        }
    }

    impl Default for Outer {
        fn default() -> Self {
            Self {
                name: "say \"hi\" \\ there".into(),
                inner: Inner::default(),
                volume: Volume::Loud,
                ratio: 0.5,
            }
        }
    }

    #[test]
    fn output_parses_back_to_the_same_value() {
        let value = Outer::default();
        let text = to_commented_toml(&value).unwrap();
        let parsed: Outer = toml::from_str(&text).unwrap();
        assert_eq!(parsed, value);

        let changed = Outer {
            volume: Volume::Quiet,
            ratio: 2.25,
            ..Outer::default()
        };
        let parsed: Outer = toml::from_str(&to_commented_toml(&changed).unwrap()).unwrap();
        assert_eq!(parsed, changed);
    }

    #[test]
    fn every_key_is_preceded_by_its_comment() {
        let text = to_commented_toml(&Outer::default()).unwrap();
        let expected = "\
# Top-level test config.
#
# Second paragraph.

# A name with \"quotes\" and a \\ backslash.
name = 'say \"hi\" \\ there'

# How loud.
#
# One of:
#   \"quiet\": Say nothing.
#   \"loud\": Say everything,
#       twice.
volume = \"loud\"

# A ratio.
ratio = 0.5

# The inner section.
[inner]
# Port to use.
port = 6969

# Names, in order.
names = [\"a\", \"b\"]

# Deeper still.
[inner.deeper]
# A flag.
flag = true
";
        assert_eq!(text, expected, "got:\n{text}");
    }

    #[test]
    fn unknown_keys_are_rejected_by_the_config_types() {
        let err = toml::from_str::<Outer>("[inner]\nprot = 1\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `prot`"), "{err}");
    }
}
