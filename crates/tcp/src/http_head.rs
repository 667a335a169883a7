//! Reading an HTTP request head that arrives in pieces, without parsing it again after
//! every read.
//!
//! Parsing the whole buffer after each read costs quadratic time in what a client
//! sends a byte at a time: a 4 KiB head one byte per read is 4,096 parses of up to
//! 4 KiB, about 8 MB scanned for 4 KB received, and with a larger limit it grows with
//! its square. [`HeadScan`] looks only at the bytes no earlier look saw, for the blank
//! line that ends a head, and says when a parse can get further than the last one.

/// Where the search for the end of one request's head has got to.
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadScan {
    searched: usize,
}

impl HeadScan {
    /// A scan of a request no byte of which has been looked at yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `received` (every byte of this request so far, the earlier ones
    /// unchanged) is worth parsing: it has a blank line, so the head may be whole,
    /// or it is `full` (as large as it may get, so the parser can say so). A parse
    /// that errs early on a malformed start waits for one of the two as well; the
    /// client's deadline bounds that wait as it bounds a slow one.
    pub fn worth_parsing(&mut self, received: &[u8], full: bool) -> bool {
        // A blank line is "\r\n\r\n" or, as httparse accepts bare line feeds,
        // "\n\n" or "\n\r\n": two bytes before the new ones can be part of it.
        let from = self.searched.saturating_sub(2).min(received.len());
        self.searched = received.len();
        full || has_blank_line(&received[from..])
    }
}

fn has_blank_line(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(i, &byte)| {
        byte == b'\n'
            && match i.checked_sub(1).map(|j| bytes[j]) {
                Some(b'\n') => true,
                Some(b'\r') => i >= 2 && bytes[i - 2] == b'\n',
                _ => false,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `request` in pieces of `piece` bytes; returns after how many bytes each
    /// parse was worth it.
    fn feed(request: &[u8], piece: usize) -> Vec<usize> {
        let mut scan = HeadScan::new();
        let mut worth = Vec::new();
        let mut received = 0;
        while received < request.len() {
            received = (received + piece).min(request.len());
            if scan.worth_parsing(&request[..received], false) {
                worth.push(received);
            }
        }
        worth
    }

    #[test]
    fn a_head_sent_a_byte_at_a_time_is_parsed_once_it_ends() {
        let crlf = b"GET /announce?x HTTP/1.1\r\nHost: a\r\nX-Y: z\r\n\r\n";
        assert_eq!(feed(crlf, 1), vec![crlf.len()]);
        let lf = b"GET /announce?x HTTP/1.1\nHost: a\n\n";
        assert_eq!(feed(lf, 1), vec![lf.len()]);
        let mixed = b"GET / HTTP/1.1\r\nHost: a\n\r\n";
        assert_eq!(feed(mixed, 1), vec![mixed.len()]);
    }

    #[test]
    fn a_blank_line_split_across_reads_is_found() {
        let request = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for piece in 1..request.len() {
            assert_eq!(
                feed(request, piece),
                vec![request.len()],
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn line_ends_that_are_not_a_blank_line_are_not_worth_a_parse() {
        assert!(!has_blank_line(b"GET / HTTP/1.1\r\nHost: a\r\n"));
        assert!(!has_blank_line(b"\r\r\n"));
        assert!(!has_blank_line(b"a\nb\r\nc"));
        assert!(has_blank_line(b"\n\n"));
        assert!(has_blank_line(b"x\n\r\n"));
    }

    #[test]
    fn a_full_buffer_is_worth_a_parse_whatever_it_holds() {
        let mut scan = HeadScan::new();
        assert!(!scan.worth_parsing(b"GET / HTTP/1.1\r\nHost", false));
        assert!(scan.worth_parsing(b"GET / HTTP/1.1\r\nHost", true));
    }

    #[test]
    fn pipelined_requests_start_a_new_scan() {
        // The rest of the buffer after one request begins the next: a new scan looks
        // at it from its start.
        let next = b"GET / HTTP/1.1\r\n\r\n";
        let mut scan = HeadScan::new();
        assert!(scan.worth_parsing(next, false));
    }
}
