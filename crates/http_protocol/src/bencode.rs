//! Writing bencode (BEP 3): integers `i42e`, byte strings `4:spam`, lists `l…e` and
//! dictionaries `d…e` whose keys are byte strings in sorted order. Callers write keys
//! in sorted order themselves; the writers here only encode.

/// Appends a byte string.
pub fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    let mut length = itoa::Buffer::new();
    out.extend_from_slice(length.format(value.len()).as_bytes());
    out.push(b':');
    out.extend_from_slice(value);
}

/// Appends an integer.
pub fn int(out: &mut Vec<u8>, value: i64) {
    let mut digits = itoa::Buffer::new();
    out.push(b'i');
    out.extend_from_slice(digits.format(value).as_bytes());
    out.push(b'e');
}

/// Appends a dictionary key and an integer value.
pub fn key_int(out: &mut Vec<u8>, key: &[u8], value: i64) {
    bytes(out, key);
    int(out, value);
}

/// Appends a dictionary key and a byte-string value.
pub fn key_bytes(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
    bytes(out, key);
    bytes(out, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_the_bep_3_examples() {
        let mut out = Vec::new();
        bytes(&mut out, b"spam");
        int(&mut out, 3);
        int(&mut out, -3);
        int(&mut out, 0);
        bytes(&mut out, b"");
        assert_eq!(out, b"4:spami3ei-3ei0e0:");
    }
}

/// A decoded bencode value (for clients and tests; the tracker only writes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `i42e`.
    Int(i64),
    /// `4:spam`.
    Bytes(Vec<u8>),
    /// `l…e`.
    List(Vec<Value>),
    /// `d…e`, in the order found.
    Dict(Vec<(Vec<u8>, Value)>),
}

/// Nesting deeper than this is rejected, so hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 32;

impl Value {
    /// Decodes exactly one value spanning all of `input`.
    pub fn parse_whole(input: &[u8]) -> Result<Value, &'static str> {
        let (value, used) = Self::parse(input, 0)?;
        if used == input.len() {
            Ok(value)
        } else {
            Err("trailing bytes")
        }
    }

    fn parse(input: &[u8], depth: usize) -> Result<(Value, usize), &'static str> {
        if depth > MAX_DEPTH {
            return Err("nested too deeply");
        }
        match input.first().ok_or("unexpected end")? {
            b'i' => {
                let end = input
                    .iter()
                    .position(|&b| b == b'e')
                    .ok_or("unterminated integer")?;
                let text = std::str::from_utf8(&input[1..end]).map_err(|_| "bad integer")?;
                let n = text.parse().map_err(|_| "bad integer")?;
                Ok((Value::Int(n), end + 1))
            }
            b'l' => {
                let mut items = Vec::new();
                let mut at = 1;
                while *input.get(at).ok_or("unterminated list")? != b'e' {
                    let (item, used) = Self::parse(&input[at..], depth + 1)?;
                    items.push(item);
                    at += used;
                }
                Ok((Value::List(items), at + 1))
            }
            b'd' => {
                let mut entries = Vec::new();
                let mut at = 1;
                while *input.get(at).ok_or("unterminated dictionary")? != b'e' {
                    let (key, used) = Self::parse(&input[at..], depth + 1)?;
                    let Value::Bytes(key) = key else {
                        return Err("dictionary key is not a string");
                    };
                    at += used;
                    let (value, used) = Self::parse(&input[at..], depth + 1)?;
                    at += used;
                    entries.push((key, value));
                }
                Ok((Value::Dict(entries), at + 1))
            }
            b'0'..=b'9' => {
                let colon = input.iter().position(|&b| b == b':').ok_or("bad string")?;
                let len: usize = std::str::from_utf8(&input[..colon])
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .ok_or("bad string length")?;
                let start = colon + 1;
                let bytes = input
                    .get(start..start.checked_add(len).ok_or("bad string length")?)
                    .ok_or("short string")?;
                Ok((Value::Bytes(bytes.to_vec()), start + len))
            }
            _ => Err("not bencode"),
        }
    }

    /// The value under `key`, for a dictionary.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(entries) => entries
                .iter()
                .find(|(k, _)| k == key.as_bytes())
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// The bytes, if this is a string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(bytes) => Some(bytes),
            _ => None,
        }
    }
}

#[cfg(test)]
mod value_tests {
    use super::*;

    #[test]
    fn decodes_nested_values() {
        let value = Value::parse_whole(b"d3:bari-7e3:fool1:ai2eee").unwrap();
        assert_eq!(value.get("bar").and_then(Value::as_int), Some(-7));
        assert_eq!(
            value.get("foo"),
            Some(&Value::List(vec![
                Value::Bytes(b"a".to_vec()),
                Value::Int(2)
            ]))
        );
        for bad in [
            &b""[..],
            b"i1",
            b"l",
            b"d1:ae",
            b"5:ab",
            b"x",
            b"i1ee",
            b"99999999999999999999:a",
        ] {
            assert!(Value::parse_whole(bad).is_err(), "{bad:?}");
        }
        let deep = [vec![b'l'; 100], vec![b'e'; 100]].concat();
        assert_eq!(Value::parse_whole(&deep), Err("nested too deeply"));
    }
}
