//! Origin rules: which web pages may open connections to the tracker.
//!
//! A browser names the page that opens a WebSocket in the upgrade's `Origin` header
//! (`https://app.example.com`, or `null` for sandboxed and local pages), and a script
//! cannot change it; other clients (Node, native apps) send none. Browser trackers
//! are abused by pages that open connections from every visitor's browser, so an
//! operator can allow only the sites that use the tracker, or deny those that abuse
//! it, refusing the upgrade with a 403 before any state is kept.
//!
//! Rules are read from a file, one per line, `allow PATTERN` or `deny PATTERN` (blank
//! lines and `#` comments ignored). Patterns:
//!
//! * `https://app.example.com`, `http://localhost:8080`: that origin exactly (scheme,
//!   host and port);
//! * `example.com`: that host, over any scheme and port;
//! * `*.example.com`: every host under example.com (not example.com itself);
//! * `*`: every request that has an Origin;
//! * `null`: the opaque origin browsers send for sandboxed and `file:` pages;
//! * `none`: requests without an Origin (clients that are not browsers).
//!
//! A request is refused when a `deny` rule matches it, or when there are `allow` rules
//! and none matches it. So `allow none` alone serves only clients that are not
//! browsers, and `allow *.example.com` alone refuses those (write `allow none` too to
//! keep them). Matching is ASCII case-insensitive.

use thiserror::Error;

/// Longest pattern, and longest Origin matched: a DNS name is at most 253 characters,
/// and a scheme and port add a few.
pub const MAX_ORIGIN_LEN: usize = 300;

/// Most rules in one file: each is compared with every upgrade until one matches.
pub const MAX_RULES: usize = 10_000;

/// What a rule matches.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// No Origin header.
    Missing,
    /// Any Origin.
    Any,
    /// This serialized origin (lowercase, no trailing slash), `null` included.
    Exact(Box<str>),
    /// This host, any scheme and port.
    Host(Box<str>),
    /// Hosts ending with this (it starts with a dot).
    Suffix(Box<str>),
}

impl Pattern {
    fn parse(text: &str) -> Result<Self, &'static str> {
        if text.len() > MAX_ORIGIN_LEN {
            return Err("pattern too long");
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("patterns are printable ASCII without spaces");
        }
        let text = text.to_ascii_lowercase();
        let text = text.trim_end_matches('/');
        if text == "none" {
            return Ok(Self::Missing);
        }
        if text == "*" {
            return Ok(Self::Any);
        }
        if text == "null" {
            return Ok(Self::Exact("null".into()));
        }
        if let Some((scheme, rest)) = text.split_once("://") {
            if scheme.is_empty() || rest.is_empty() || text.contains('*') {
                return Err("an origin is scheme://host[:port], without wildcards");
            }
            return Ok(Self::Exact(text.into()));
        }
        let (wild, host) = match text.strip_prefix("*.") {
            Some(host) => (true, host),
            None => (false, text),
        };
        let ipv6_literal = !wild
            && host.len() > 2
            && host.starts_with('[')
            && host.ends_with(']')
            && host[1..host.len() - 1]
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.'));
        let valid_host = ipv6_literal
            || (!host.is_empty()
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
                && !host.starts_with('.'));
        if !valid_host {
            return Err(
                "expected an origin (https://host), a host name, *.domain, *, null or none",
            );
        }
        Ok(if wild {
            Self::Suffix(format!(".{host}").into())
        } else {
            Self::Host(host.into())
        })
    }

    /// Whether the pattern matches `origin` (lowercase, as [`normalize`] leaves it),
    /// whose host is `host`.
    fn matches(&self, origin: Option<(&str, &str)>) -> bool {
        match (self, origin) {
            (Self::Missing, None) => true,
            (Self::Missing, Some(_)) | (_, None) => false,
            (Self::Any, Some(_)) => true,
            (Self::Exact(exact), Some((origin, _))) => **exact == *origin,
            (Self::Host(name), Some((_, host))) => **name == *host,
            (Self::Suffix(suffix), Some((_, host))) => host.ends_with(&**suffix),
        }
    }
}

/// A line of an origin rules file that is not a rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {problem}")]
pub struct OriginRuleError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

/// Origin rules, parsed (see the module's notes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginRules {
    allow: Vec<Pattern>,
    deny: Vec<Pattern>,
}

/// Why an upgrade's Origin was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OriginRefusal {
    /// A `deny` rule matched.
    Denied,
    /// There are `allow` rules and none matched.
    NotAllowed,
}

impl OriginRules {
    /// Reads a rules file's text.
    pub fn parse(text: &str) -> Result<Self, OriginRuleError> {
        let mut rules = Self::default();
        for (index, line) in text.lines().enumerate() {
            let error = |problem: &str| OriginRuleError {
                line: index + 1,
                problem: problem.to_owned(),
            };
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_ascii_whitespace();
            let (Some(verb), Some(pattern), None) = (words.next(), words.next(), words.next())
            else {
                return Err(error("expected `allow PATTERN` or `deny PATTERN`"));
            };
            let pattern = Pattern::parse(pattern).map_err(error)?;
            match verb {
                "allow" => rules.allow.push(pattern),
                "deny" => rules.deny.push(pattern),
                _ => return Err(error("a rule starts with `allow` or `deny`")),
            }
            if rules.len() > MAX_RULES {
                return Err(error(&format!("more than {MAX_RULES} rules")));
            }
        }
        Ok(rules)
    }

    /// Rules in all.
    pub fn len(&self) -> usize {
        self.allow.len() + self.deny.len()
    }

    /// Whether there are none (every upgrade is served).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an upgrade whose `Origin` header is `origin` ([`normalize`]d; `None`:
    /// it has none) is served.
    pub fn check(&self, origin: Option<&str>) -> Result<(), OriginRefusal> {
        if self.is_empty() {
            return Ok(());
        }
        let origin = origin.map(|origin| (origin, host_of(origin)));
        if self.deny.iter().any(|pattern| pattern.matches(origin)) {
            return Err(OriginRefusal::Denied);
        }
        if !self.allow.is_empty() && !self.allow.iter().any(|pattern| pattern.matches(origin)) {
            return Err(OriginRefusal::NotAllowed);
        }
        Ok(())
    }
}

/// An Origin header's value as rules and caps compare it: trimmed, lowercase, without
/// a trailing slash; empty when it is longer than [`MAX_ORIGIN_LEN`] or not ASCII
/// (no pattern but `*` matches that, and caps count all such origins as one).
pub fn normalize(value: &[u8]) -> String {
    let value = value.trim_ascii();
    let value = value.strip_suffix(b"/").unwrap_or(value);
    if value.len() > MAX_ORIGIN_LEN || !value.is_ascii() {
        return String::new();
    }
    String::from_utf8_lossy(value).to_ascii_lowercase()
}

/// The host of a serialized origin (`scheme://host[:port]`): "" for `null` and
/// anything without a scheme.
fn host_of(origin: &str) -> &str {
    let Some((_, rest)) = origin.split_once("://") else {
        return "";
    };
    if rest.starts_with('[') {
        // An IPv6 literal keeps its brackets: [::1]:8080.
        return rest.find(']').map_or(rest, |end| &rest[..=end]);
    }
    rest.split([':', '/']).next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> OriginRules {
        OriginRules::parse(text).unwrap()
    }

    fn served(rules: &OriginRules, origin: Option<&str>) -> bool {
        let origin = origin.map(|origin| normalize(origin.as_bytes()));
        rules.check(origin.as_deref()).is_ok()
    }

    #[test]
    fn no_rules_serve_everyone() {
        let none = rules("# nothing\n\n");
        assert!(none.is_empty());
        for origin in [None, Some("https://a.example"), Some("null")] {
            assert!(served(&none, origin));
        }
    }

    #[test]
    fn an_allow_list_serves_only_what_it_names() {
        let list = rules(
            "allow https://app.example.com   # the site\n\
             allow *.cdn.example.org\n\
             allow example.net\n",
        );
        assert_eq!(list.len(), 3);
        for origin in [
            "https://app.example.com",
            "HTTPS://APP.EXAMPLE.COM/",
            "https://a.cdn.example.org",
            "http://x.y.cdn.example.org:8080",
            "http://example.net:81",
            "https://example.net",
        ] {
            assert!(served(&list, Some(origin)), "{origin}");
        }
        for origin in [
            "http://app.example.com",
            "https://app.example.com:8443",
            "https://cdn.example.org",
            "https://evilcdn.example.org",
            "https://example.net.evil.com",
            "https://sub.example.net",
            "null",
        ] {
            assert!(!served(&list, Some(origin)), "{origin}");
        }
        // Clients without an Origin are refused unless `none` is allowed.
        assert_eq!(list.check(None), Err(OriginRefusal::NotAllowed));
        let with_none = rules("allow example.net\nallow none\n");
        assert!(served(&with_none, None));
    }

    #[test]
    fn deny_wins_over_allow() {
        let list = rules("deny *.abuse.example\ndeny null\nallow *\nallow none\n");
        assert!(served(&list, Some("https://fine.example")));
        assert!(served(&list, None));
        assert_eq!(
            list.check(Some("https://x.abuse.example")),
            Err(OriginRefusal::Denied)
        );
        assert!(!served(&list, Some("null")));
        // Only non-browser clients.
        let no_browsers = rules("deny *\n");
        assert!(served(&no_browsers, None));
        assert!(!served(&no_browsers, Some("https://a.example")));
        assert!(!served(&no_browsers, Some("garbage")));
    }

    #[test]
    fn hosts_are_found_in_every_origin_form() {
        assert_eq!(host_of("https://a.example"), "a.example");
        assert_eq!(host_of("http://a.example:8080"), "a.example");
        assert_eq!(host_of("http://[::1]:8080"), "[::1]");
        assert_eq!(host_of("null"), "");
        assert_eq!(host_of("file://"), "");
        let local = rules("allow localhost\nallow [::1]\n");
        assert!(served(&local, Some("http://localhost:3000")));
        assert!(served(&local, Some("http://[::1]:3000")));
    }

    #[test]
    fn odd_origins_match_only_wildcards() {
        let list = rules("allow a.example\n");
        let long = format!("https://{}.a.example", "x".repeat(400));
        assert!(!served(&list, Some(&long)));
        assert_eq!(normalize("https://a.example\u{e9}".as_bytes()), "");
        assert_eq!(normalize(b" https://A.Example/ "), "https://a.example");
        assert!(!served(&list, Some("https://a.example\u{e9}")));
        let any = rules("allow *\n");
        assert!(served(&any, Some(&long)));
        assert!(!served(&any, None));
    }

    #[test]
    fn bad_lines_are_named() {
        for (text, line, problem) in [
            ("allow\n", 1, "expected `allow PATTERN`"),
            ("\npermit a.example\n", 2, "starts with `allow` or `deny`"),
            ("allow a b\n", 1, "expected `allow PATTERN`"),
            ("allow https://*.a.example\n", 1, "without wildcards"),
            ("allow a.*.example\n", 1, "expected an origin"),
            ("allow ://x\n", 1, "scheme://host"),
            ("deny .example\n", 1, "expected an origin"),
        ] {
            let err = OriginRules::parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}");
            assert!(err.problem.contains(problem), "{text:?}: {err}");
        }
        let long = format!("allow {}\n", "a".repeat(MAX_ORIGIN_LEN + 1));
        assert!(OriginRules::parse(&long).is_err());
        let many = "allow a.example\n".repeat(MAX_RULES + 1);
        assert!(
            OriginRules::parse(&many)
                .unwrap_err()
                .problem
                .contains("more than")
        );
    }
}
