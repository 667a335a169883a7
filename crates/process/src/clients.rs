//! The connections of the monitoring endpoint and the admin API: many at once on one
//! thread (mio), each with a deadline, a bounded request (head and body), and a cap
//! on how many are open.
//!
//! One connection at a time, as before, let five silent connections hold `/health`
//! for 10 s, and three that kept reconnecting hold it at about 5 s a request: a load
//! balancer's health check or the watchdog's view could be starved by anyone who
//! reaches the port. Here every connection reads its request head without blocking
//! the others; one that has not been answered by its deadline is closed, and at the
//! cap the oldest gives way to a newcomer, so silent connections cannot lock out a
//! scraper however many there are.

use std::collections::BTreeMap;
use std::io::{self, Read as _, Write as _};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use shoal_common::Shutdown;

/// How long one monitoring client may take from being accepted to having read the
/// answer.
pub(crate) const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections open at once; at the cap the oldest is closed to let a newcomer in.
pub(crate) const MAX_CLIENTS: usize = 256;
/// Largest request head read.
pub(crate) const MAX_REQUEST: usize = 8192;

/// What one connection may take.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// From being accepted to having read the answer.
    pub(crate) timeout: Duration,
    /// The largest body (`Content-Length`); 0 takes none.
    pub(crate) max_body: usize,
}

impl Limits {
    /// The monitoring endpoint's: GETs answered within [`CLIENT_TIMEOUT`].
    pub(crate) const MONITOR: Self = Self {
        timeout: CLIENT_TIMEOUT,
        max_body: 0,
    };
}
/// The listener's token; clients count up from 1.
const LISTENER: Token = Token(0);
/// Longest wait between looks at the shutdown flag (and the periodic work).
const TICK: Duration = Duration::from_millis(100);

/// One open connection.
struct Client {
    stream: TcpStream,
    deadline: Instant,
    /// The request read so far; once its head is whole, where the head ends and how
    /// long the body is.
    head: Vec<u8>,
    framed: Option<(usize, usize)>,
    /// The answer, once the head is whole, and how much of it went out.
    answer: Option<(Vec<u8>, usize)>,
}

/// What a connection's turn ended with.
enum Next {
    /// Waits for more bytes or for room to write.
    Wait,
    /// Done or failed: close it.
    Close,
}

/// Serves `listener` until `shutdown`: `respond` turns a whole request, its head and
/// its body, into the bytes of the answer (the connection closes after it); `tick`
/// runs at least every [`TICK`].
pub(crate) fn serve(
    listener: std::net::TcpListener,
    shutdown: &Shutdown,
    limits: Limits,
    mut respond: impl FnMut(&[u8], &[u8]) -> Vec<u8>,
    mut tick: impl FnMut(),
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(256);
    let mut clients: BTreeMap<usize, Client> = BTreeMap::new();
    let mut next_token = 1;
    while !shutdown.is_requested() {
        tick();
        let now = Instant::now();
        // Deadlines first: what is past its own closes, however busy the rest.
        clients.retain(|_, client| client.deadline > now);
        let wait = clients
            .values()
            .map(|client| client.deadline.saturating_duration_since(now))
            .min()
            .map_or(TICK, |left| left.min(TICK));
        if let Err(err) = poll.poll(&mut events, Some(wait)) {
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        for event in &events {
            if event.token() == LISTENER {
                accept_all(&listener, &poll, &mut clients, &mut next_token, limits);
                continue;
            }
            let token = event.token().0;
            let Some(client) = clients.get_mut(&token) else {
                continue;
            };
            if let Next::Close = client.advance(limits, &mut respond) {
                clients.remove(&token);
            }
        }
    }
    Ok(())
}

/// Accepts every waiting connection; at [`MAX_CLIENTS`] the oldest open one closes
/// for each newcomer.
fn accept_all(
    listener: &TcpListener,
    poll: &Poll,
    clients: &mut BTreeMap<usize, Client>,
    next_token: &mut usize,
    limits: Limits,
) {
    loop {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => {
                // Descriptors exhausted, most likely: the next poll retries.
                log::debug!("monitoring endpoint: cannot accept: {err}");
                return;
            }
        };
        if clients.len() >= MAX_CLIENTS {
            clients.pop_first();
        }
        let token = *next_token;
        *next_token += 1;
        let interest = Interest::READABLE | Interest::WRITABLE;
        if poll
            .registry()
            .register(&mut stream, Token(token), interest)
            .is_err()
        {
            continue;
        }
        clients.insert(
            token,
            Client {
                stream,
                deadline: Instant::now() + limits.timeout,
                head: Vec::with_capacity(512),
                framed: None,
                answer: None,
            },
        );
    }
}

impl Client {
    /// Reads what there is, answers once the request is whole, writes what fits.
    fn advance(
        &mut self,
        limits: Limits,
        respond: &mut impl FnMut(&[u8], &[u8]) -> Vec<u8>,
    ) -> Next {
        if self.answer.is_none() {
            let mut buffer = [0u8; 4096];
            loop {
                match self.stream.read(&mut buffer) {
                    Ok(0) => return Next::Close,
                    Ok(read) => {
                        self.head.extend_from_slice(&buffer[..read]);
                        if let Some(answer) = self.answer_when_whole(limits, respond) {
                            self.answer = Some((answer, 0));
                            break;
                        }
                        let most = self.framed.map_or(MAX_REQUEST, |(head, body)| head + body);
                        if self.head.len() > most {
                            return Next::Close;
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Wait,
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return Next::Close,
                }
            }
        }
        let Some((answer, written)) = &mut self.answer else {
            return Next::Wait;
        };
        while *written < answer.len() {
            match self.stream.write(&answer[*written..]) {
                Ok(0) => return Next::Close,
                Ok(sent) => *written += sent,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Next::Wait,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Next::Close,
            }
        }
        // All written: `Connection: close`, so the stream's drop ends it.
        Next::Close
    }

    /// The answer, once the request read so far is whole (or can be refused).
    fn answer_when_whole(
        &mut self,
        limits: Limits,
        respond: &mut impl FnMut(&[u8], &[u8]) -> Vec<u8>,
    ) -> Option<Vec<u8>> {
        if self.framed.is_none() {
            let end = head_end(&self.head)?;
            match body_length(&self.head[..end]) {
                Ok(length) if length <= limits.max_body => self.framed = Some((end, length)),
                Ok(_) => return Some(refusal("413 Content Too Large", "body too large\n")),
                Err(problem) => return Some(refusal("400 Bad Request", problem)),
            }
        }
        let (end, length) = self.framed?;
        (self.head.len() >= end + length)
            .then(|| respond(&self.head[..end], &self.head[end..end + length]))
    }
}

/// The length of the body a request head announces: `Content-Length`, or none. A
/// chunked body, or lengths that disagree, are refused (a proxy could read the
/// request's end elsewhere).
fn body_length(head: &[u8]) -> Result<usize, &'static str> {
    let mut length = None;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err("chunked bodies are not taken: send Content-Length\n");
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            let parsed = std::str::from_utf8(value)
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<usize>().ok())
                .ok_or("Content-Length is not a number\n")?;
            if length.is_some_and(|known| known != parsed) {
                return Err("two Content-Length headers disagree\n");
            }
            length = Some(parsed);
        }
    }
    Ok(length.unwrap_or(0))
}

/// A whole answer refusing a request before it reached `respond`.
fn refusal(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Where a request head ends (after its blank line), if it is whole.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .map(|at| at + 4)
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream as StdStream;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn start(
        respond: impl FnMut(&[u8]) -> Vec<u8> + Send + 'static,
    ) -> (std::net::SocketAddr, Shutdown) {
        let mut respond = respond;
        start_with(Limits::MONITOR, move |head, _| respond(head))
    }

    fn start_with(
        limits: Limits,
        respond: impl FnMut(&[u8], &[u8]) -> Vec<u8> + Send + 'static,
    ) -> (std::net::SocketAddr, Shutdown) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let shutdown = Shutdown::default();
        let stop = shutdown.clone();
        std::thread::spawn(move || serve(listener, &stop, limits, respond, || {}).unwrap());
        (address, shutdown)
    }

    fn get(address: std::net::SocketAddr) -> (Vec<u8>, Duration) {
        let started = Instant::now();
        let mut stream = StdStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).unwrap();
        (answer, started.elapsed())
    }

    #[test]
    fn silent_connections_do_not_delay_an_answer() {
        let (address, shutdown) = start(|_| b"HTTP/1.1 200 OK\r\n\r\nok\n".to_vec());
        let silent: Vec<StdStream> = (0..100)
            .map(|_| StdStream::connect(address).unwrap())
            .collect();
        // Some that sent part of a head and stopped.
        for stream in &silent[..10] {
            (&*stream).write_all(b"GET /hea").unwrap();
        }
        for _ in 0..5 {
            let (answer, took) = get(address);
            assert!(answer.ends_with(b"ok\n"), "{answer:?}");
            assert!(took < Duration::from_millis(100), "took {took:?}");
        }
        drop(silent);
        shutdown.request();
    }

    #[test]
    fn at_the_cap_the_oldest_gives_way_and_deadlines_close_the_silent() {
        let answered = Arc::new(AtomicUsize::new(0));
        let count = answered.clone();
        let (address, shutdown) = start(move |_| {
            count.fetch_add(1, Ordering::Relaxed);
            b"HTTP/1.1 200 OK\r\n\r\nok\n".to_vec()
        });
        let mut oldest = StdStream::connect(address).unwrap();
        let _rest: Vec<StdStream> = (0..MAX_CLIENTS)
            .map(|_| StdStream::connect(address).unwrap())
            .collect();
        // The newest is served; the oldest was closed for it.
        let (answer, _) = get(address);
        assert!(answer.ends_with(b"ok\n"));
        oldest
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(oldest.read(&mut byte).unwrap_or(0), 0, "closed");
        // A silent connection is closed at its deadline.
        let mut silent = StdStream::connect(address).unwrap();
        silent.set_read_timeout(Some(CLIENT_TIMEOUT * 3)).unwrap();
        let started = Instant::now();
        assert_eq!(silent.read(&mut byte).unwrap_or(0), 0);
        let took = started.elapsed();
        assert!(
            took >= CLIENT_TIMEOUT - Duration::from_millis(200),
            "{took:?}"
        );
        assert!(took < CLIENT_TIMEOUT * 2, "{took:?}");
        assert_eq!(answered.load(Ordering::Relaxed), 1);
        // A head too large is closed without an answer.
        let mut large = StdStream::connect(address).unwrap();
        let _ = large.write_all(&vec![b'a'; MAX_REQUEST + 2048]);
        large
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = large.read_to_end(&mut answer);
        assert!(answer.is_empty());
        shutdown.request();
    }

    fn exchange(address: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = StdStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let _ = stream.write_all(request);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[test]
    fn bodies_are_read_whole_within_their_limit() {
        let limits = Limits {
            timeout: Duration::from_secs(2),
            max_body: 16,
        };
        let (address, shutdown) = start_with(limits, |_, body| {
            let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
            answer.extend_from_slice(body);
            answer
        });
        // Sent in two writes: answered once the body is whole.
        let mut stream = StdStream::connect(address).unwrap();
        stream
            .write_all(b"PUT /x HTTP/1.1\r\ncontent-length: 5\r\n\r\nhe")
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        stream.write_all(b"llo").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.ends_with("\r\n\r\nhello"), "{answer:?}");
        let big = exchange(address, b"PUT /x HTTP/1.1\r\nContent-Length: 17\r\n\r\n");
        assert!(big.starts_with("HTTP/1.1 413"), "{big}");
        let chunked = exchange(
            address,
            b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        );
        assert!(chunked.starts_with("HTTP/1.1 400"), "{chunked}");
        let twice = exchange(
            address,
            b"PUT /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        );
        assert!(twice.starts_with("HTTP/1.1 400"), "{twice}");
        let sign = exchange(address, b"PUT /x HTTP/1.1\r\nContent-Length: +1\r\n\r\na");
        assert!(sign.starts_with("HTTP/1.1 400"), "{sign}");
        // The monitoring endpoint takes no body at all.
        let (monitor, stop) = start(|_| b"HTTP/1.1 200 OK\r\n\r\n".to_vec());
        let any = exchange(monitor, b"GET / HTTP/1.1\r\nContent-Length: 1\r\n\r\na");
        assert!(any.starts_with("HTTP/1.1 413"), "{any}");
        stop.request();
        shutdown.request();
    }
}
