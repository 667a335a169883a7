//! The key of a config file that no setting has, with its line and the nearest known
//! spelling. serde's own message for it names the sections inside out ("in `network`
//! in `udp`") and no line: the tracker sections are flattened into one table, which
//! loses the positions. The documented key tree ([`Docs`]) knows every key, so the
//! file is checked against it first.

use std::fmt;

use shoal_toml_config::Docs;

/// A key the config does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UnknownKey {
    /// Its dotted path, e.g. `udp.network.socket_workrs`.
    pub path: String,
    /// Its 1-based line in the file, when found.
    pub line: Option<usize>,
    /// The known key of the same section spelled most like it, if one is close.
    pub suggestion: Option<String>,
    /// Every key of that section.
    pub known: Vec<&'static str>,
}

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "unknown key `{}`", self.path)?;
        if let Some(suggestion) = &self.suggestion {
            write!(f, "; did you mean `{suggestion}`?")?;
        }
        write!(f, " (keys here: {})", self.known.join(", "))
    }
}

/// The first unknown key of `text` (by line) that `docs` describes, if any. `None`
/// also for text that is not TOML: the parser's own message says where.
pub(crate) fn find(text: &str, docs: &Docs) -> Option<UnknownKey> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let mut found = Vec::new();
    walk(&table, docs, docs, &mut Vec::new(), &mut found);
    let mut found: Vec<UnknownKey> = found
        .into_iter()
        .map(|(path, suggestion, known)| UnknownKey {
            line: line_of(text, &path),
            path: path.join("."),
            suggestion,
            known,
        })
        .collect();
    found.sort_by_key(|unknown| unknown.line.unwrap_or(usize::MAX));
    found.into_iter().next()
}

type Found = (Vec<String>, Option<String>, Vec<&'static str>);

fn walk(
    table: &toml::Table,
    docs: &Docs,
    root: &Docs,
    path: &mut Vec<String>,
    found: &mut Vec<Found>,
) {
    let Docs::Struct { fields, .. } = docs else {
        return;
    };
    for (key, value) in table {
        match fields.iter().find(|field| field.key == key) {
            Some(field) => {
                if let toml::Value::Table(inner) = value {
                    path.push(key.clone());
                    walk(inner, &field.docs, root, path, found);
                    path.pop();
                }
            }
            None => {
                let known: Vec<&'static str> = fields.iter().map(|field| field.key).collect();
                let suggestion = match nearest(key, &known) {
                    Some(near) => {
                        let mut full = path.clone();
                        full.push(near.to_owned());
                        Some(full.join("."))
                    }
                    // A key of another section (`socket_workers` under [udp.network]).
                    None => elsewhere(key, root),
                };
                let mut full = path.clone();
                full.push(key.clone());
                found.push((full, suggestion, known));
            }
        }
    }
}

/// The known key closest to `key` in edits, when within a third of its length (at
/// least one edit): `socket_workrs` → `socket_workers`, `protocl` → `protocol`.
fn nearest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let most = (key.chars().count() / 3).max(1);
    known
        .iter()
        .map(|candidate| (edits(key, candidate), *candidate))
        .filter(|(distance, _)| *distance <= most)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// The full path of the key anywhere under `root` spelled most like `key` (within
/// the same bound as [`nearest`]), for a key written in the wrong section.
fn elsewhere(key: &str, root: &Docs) -> Option<String> {
    fn collect(docs: &Docs, path: &mut Vec<&'static str>, all: &mut Vec<String>, key: &str) {
        let Docs::Struct { fields, .. } = docs else {
            return;
        };
        let keys: Vec<&'static str> = fields.iter().map(|field| field.key).collect();
        if let Some(near) = nearest(key, &keys) {
            let mut full = path.clone();
            full.push(near);
            all.push(full.join("."));
        }
        for field in fields {
            path.push(field.key);
            collect(&field.docs, path, all, key);
            path.pop();
        }
    }
    let mut all = Vec::new();
    collect(root, &mut Vec::new(), &mut all, key);
    let key_of = |path: &str| path.rsplit('.').next().unwrap_or(path).to_owned();
    all.into_iter().min_by_key(|path| edits(key, &key_of(path)))
}

/// serde's message for a bad value (`invalid type: ..., expected usize` followed by
/// "in `protocol.max_peers`" and "in `udp`" lines, innermost first) with the key's
/// full path and its line in front.
pub(crate) fn locate(text: &str, message: &str) -> String {
    let mut lines = message.lines();
    let first = lines.next().unwrap_or_default();
    let mut parts: Vec<&str> = lines
        .filter_map(|line| line.trim().strip_prefix("in `")?.strip_suffix('`'))
        .collect();
    if parts.is_empty() {
        return message.to_owned();
    }
    parts.reverse();
    let path = parts.join(".");
    match line_of(text, &dotted(&path)) {
        Some(line) => format!("line {line}: `{path}`: {first}"),
        None => format!("`{path}`: {first}"),
    }
}

/// Levenshtein distance.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

/// The line where `path` is written: a `[table]` header, or a `key = ` line (dotted
/// keys too) under the header of its parent. A line-oriented reading, good for the
/// files `-p` prints and people edit; `None` for forms it does not follow (a key
/// inside an inline table).
fn line_of(text: &str, path: &[String]) -> Option<usize> {
    let mut section: Vec<String> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            let Some(end) = header.find(']') else {
                continue;
            };
            section = dotted(&header[..end]);
            if section.starts_with(path) {
                return Some(index + 1);
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        let mut full = section.clone();
        full.extend(dotted(key));
        if full.starts_with(path) {
            return Some(index + 1);
        }
    }
    None
}

/// `a . "b" .c` → `["a", "b", "c"]`.
fn dotted(text: &str) -> Vec<String> {
    text.split('.')
        .map(|part| part.trim().trim_matches('"').trim_matches('\'').to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use shoal_toml_config::FieldDoc;

    use super::*;

    fn docs() -> Docs {
        let leaf = |key| FieldDoc {
            key,
            doc: "",
            docs: Docs::Leaf,
        };
        let section = |key, fields| FieldDoc {
            key,
            doc: "",
            docs: Docs::Struct {
                doc: "".into(),
                fields,
            },
        };
        Docs::Struct {
            doc: "".into(),
            fields: vec![
                section(
                    "udp",
                    vec![
                        leaf("socket_workers"),
                        section("network", vec![leaf("address_ipv4"), leaf("use_ipv4")]),
                        section("protocol", vec![leaf("max_peers")]),
                    ],
                ),
                section("logging", vec![leaf("level")]),
            ],
        }
    }

    #[test]
    fn an_unknown_key_is_named_in_order_with_its_line_and_a_spelling() {
        let text = "[logging]\nlevel = \"info\"\n\n[udp.network]\n# a comment\nuse_ipv4 = true\n\
                    adress_ipv4 = \"0.0.0.0:6969\"\n";
        let unknown = find(text, &docs()).unwrap();
        assert_eq!(
            unknown.to_string(),
            "line 7: unknown key `udp.network.adress_ipv4`; did you mean \
             `udp.network.address_ipv4`? (keys here: address_ipv4, use_ipv4)"
        );
    }

    #[test]
    fn sections_and_dotted_keys_are_found_too() {
        let unknown = find("[udp.protocl]\nmax_peers = 5\n", &docs()).unwrap();
        assert_eq!(unknown.path, "udp.protocl");
        assert_eq!(unknown.line, Some(1));
        assert_eq!(unknown.suggestion.as_deref(), Some("udp.protocol"));
        let unknown = find(
            "[udp]\nsocket_workers = 1\nnetwork.use_ipv6 = true\n",
            &docs(),
        )
        .unwrap();
        assert_eq!(
            (unknown.path.as_str(), unknown.line),
            ("udp.network.use_ipv6", Some(3))
        );
        // Nothing close: no suggestion.
        let unknown = find("[logging]\ncolour = true\n", &docs()).unwrap();
        assert_eq!(unknown.suggestion, None);
        assert_eq!(
            unknown.to_string(),
            "line 2: unknown key `logging.colour` (keys here: level)"
        );
    }

    #[test]
    fn the_earliest_line_wins_and_known_files_pass() {
        let text = "[udp]\nsocket_workrs = 2\n[logging]\nlevle = \"info\"\n";
        assert_eq!(find(text, &docs()).unwrap().line, Some(2));
        assert_eq!(find("[udp]\nsocket_workers = 2\n", &docs()), None);
        assert_eq!(find("not toml [", &docs()), None);
    }

    #[test]
    fn a_key_in_the_wrong_section_is_pointed_to_its_own() {
        let unknown = find("[udp.network]\nsocket_workrs = 2\n", &docs()).unwrap();
        assert_eq!(unknown.suggestion.as_deref(), Some("udp.socket_workers"));
    }

    #[test]
    fn a_bad_value_is_named_by_its_full_path_and_line() {
        let text = "[udp]\nsocket_workers = 1\n[udp.protocol]\nmax_peers = \"many\"\n";
        let message =
            "invalid type: string \"many\", expected usize\nin `protocol.max_peers`\n\nin `udp`";
        assert_eq!(
            locate(text, message),
            "line 4: `udp.protocol.max_peers`: invalid type: string \"many\", expected usize"
        );
        assert_eq!(locate(text, "expected `=`"), "expected `=`");
    }

    #[test]
    fn edits_count_insertions_deletions_and_substitutions() {
        assert_eq!(edits("socket_workrs", "socket_workers"), 1);
        assert_eq!(edits("protocl", "protocol"), 1);
        assert_eq!(edits("abc", "abc"), 0);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
    }
}
