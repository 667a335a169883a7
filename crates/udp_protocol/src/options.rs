//! BEP 41 announce options: the bytes that may follow the 98-byte announce body.
//!
//! Each option starts with a type byte. `0` (end of options) and `1` (no-op) stand
//! alone; every other type is followed by a length byte and that many bytes of data.
//! Type `2` carries URL data: the path and query of the announce URL, split over as
//! many options as needed, to be concatenated.
//!
//! Parsing is lenient by design: options are a hint, so an unknown option is skipped
//! and a truncated one simply ends the list; the announce itself stays valid.

/// Option type: end of options.
pub const END_OF_OPTIONS: u8 = 0x0;
/// Option type: no-op padding.
pub const NOP: u8 = 0x1;
/// Option type: a piece of the announce URL's path and query.
pub const URL_DATA: u8 = 0x2;

/// The raw option bytes of an announce, borrowed from the packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnnounceOptions<'a>(pub &'a [u8]);

impl<'a> AnnounceOptions<'a> {
    /// The URL data pieces in order.
    pub fn url_data(&self) -> UrlData<'a> {
        UrlData { rest: self.0 }
    }

    /// The URL data pieces joined (e.g. `/announce?key=abc`).
    pub fn url_data_joined(&self) -> Vec<u8> {
        self.url_data().flatten().copied().collect()
    }

    /// Writes `url` as URL data options (255 bytes per option) and an end marker.
    pub fn write_url_data(url: &[u8], out: &mut Vec<u8>) {
        for piece in url.chunks(255) {
            out.push(URL_DATA);
            out.push(piece.len() as u8);
            out.extend_from_slice(piece);
        }
        out.push(END_OF_OPTIONS);
    }
}

/// Iterator over the URL data pieces of an option list.
#[derive(Clone, Debug)]
pub struct UrlData<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for UrlData<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&kind, after_kind) = self.rest.split_first()?;
            match kind {
                END_OF_OPTIONS => {
                    self.rest = &[];
                    return None;
                }
                NOP => self.rest = after_kind,
                _ => {
                    let Some((&len, after_len)) = after_kind.split_first() else {
                        self.rest = &[];
                        return None; // truncated: no length byte
                    };
                    let Some((data, after_data)) = after_len.split_at_checked(len.into()) else {
                        self.rest = &[];
                        return None; // truncated: data shorter than its length
                    };
                    self.rest = after_data;
                    if kind == URL_DATA {
                        return Some(data);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(bytes: &[u8]) -> Vec<u8> {
        AnnounceOptions(bytes).url_data_joined()
    }

    #[test]
    fn bep_41_example_is_joined() {
        // The BEP's example: "/announce?key=abc" split over two options, no-ops between.
        let mut bytes = vec![URL_DATA, 9];
        bytes.extend_from_slice(b"/announce");
        bytes.extend_from_slice(&[NOP, NOP, URL_DATA, 8]);
        bytes.extend_from_slice(b"?key=abc");
        bytes.push(END_OF_OPTIONS);
        assert_eq!(joined(&bytes), b"/announce?key=abc");
    }

    #[test]
    fn unknown_options_are_skipped() {
        let bytes = [0x7f, 2, 0xaa, 0xbb, URL_DATA, 1, b'/', END_OF_OPTIONS];
        assert_eq!(joined(&bytes), b"/");
    }

    #[test]
    fn nothing_after_end_of_options_is_read() {
        let bytes = [URL_DATA, 1, b'a', END_OF_OPTIONS, URL_DATA, 1, b'b'];
        assert_eq!(joined(&bytes), b"a");
    }

    #[test]
    fn truncated_options_end_the_list_quietly() {
        assert_eq!(joined(&[URL_DATA, 1, b'a', URL_DATA, 5, b'x']), b"a");
        assert_eq!(joined(&[URL_DATA, 1, b'a', URL_DATA]), b"a");
        assert_eq!(joined(&[0x09]), b"");
        assert_eq!(joined(&[]), b"");
    }

    #[test]
    fn long_urls_are_written_in_pieces_and_read_back() {
        let url: Vec<u8> = (0..600).map(|i| b'a' + (i % 26) as u8).collect();
        let mut bytes = Vec::new();
        AnnounceOptions::write_url_data(&url, &mut bytes);
        assert_eq!(AnnounceOptions(&bytes).url_data().count(), 3);
        assert_eq!(joined(&bytes), url);
    }
}
