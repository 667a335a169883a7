//! The HTTPS client instant-acme speaks through: one blocking request per
//! connection (`Connection: close`), on the ACME thread. A certificate order is a
//! dozen requests every few weeks; an async HTTP stack (hyper and tokio) would be a
//! second runtime in the tracker for that.

use std::future::Future;
use std::io::{self, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};

/// Most bytes of a response: a certificate chain or a directory is a few kilobytes.
const MAX_RESPONSE: usize = 1 << 20;

/// Most bytes of a file of trusted CA certificates (Debian's bundle is about 220 KB).
const MAX_ROOTS_FILE: u64 = 16 << 20;

/// How long connecting, and each read or write, may take.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A blocking HTTPS client trusting the CA certificates of one PEM file.
#[derive(Clone, Debug)]
pub(crate) struct BlockingHttps {
    tls: Arc<rustls::ClientConfig>,
}

impl BlockingHttps {
    /// A client trusting the certificates in `roots` (a PEM bundle such as
    /// /etc/ssl/certs/ca-certificates.crt).
    pub(crate) fn trusting(roots: &Path) -> anyhow::Result<Self> {
        let pem = shoal_common::read_bounded(roots, MAX_ROOTS_FILE)
            .with_context(|| format!("cannot read CA certificates from {}", roots.display()))?;
        let mut store = rustls::RootCertStore::empty();
        let certificates = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("invalid PEM in {}", roots.display()))?;
        let (added, _) = store.add_parsable_certificates(certificates);
        ensure!(added > 0, "no usable CA certificate in {}", roots.display());
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("cannot set up TLS protocol versions")?
            .with_root_certificates(store)
            .with_no_client_auth();
        Ok(Self { tls: Arc::new(tls) })
    }

    /// Sends `request` and reads the whole response.
    fn send(&self, request: http::Request<Bytes>) -> anyhow::Result<http::Response<Bytes>> {
        let uri = request.uri();
        ensure!(
            uri.scheme_str() == Some("https"),
            "{uri}: ACME servers are reached over https only"
        );
        let host = uri.host().context("no host in the URL")?.to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let target = uri.path_and_query().map_or("/", |path| path.as_str());
        let mut head = format!("{} {target} HTTP/1.1\r\nHost: {host}", request.method());
        if port != 443 {
            head += &format!(":{port}");
        }
        head += concat!(
            "\r\nUser-Agent: shoal/",
            env!("CARGO_PKG_VERSION"),
            "\r\nConnection: close\r\n"
        );
        for (name, value) in request.headers() {
            let value = value.to_str().context("a header that is not text")?;
            head += &format!("{name}: {value}\r\n");
        }
        let body = request.body();
        if !body.is_empty() || request.method() == http::Method::POST {
            head += &format!("Content-Length: {}\r\n", body.len());
        }
        head += "\r\n";

        let name = ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
            .with_context(|| format!("{host} is not a server name"))?;
        let tcp = connect(&host, port)?;
        let connection =
            rustls::ClientConnection::new(self.tls.clone(), name).context("cannot start TLS")?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        stream.flush()?;
        let no_body = request.method() == http::Method::HEAD;
        read_response(&mut stream, no_body).with_context(|| format!("{} {uri}", request.method()))
    }
}

impl HttpClient for BlockingHttps {
    fn request(
        &self,
        request: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let client = self.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let Ok(body) = body.collect().await;
            let body = body.to_bytes();
            let response = client
                .send(http::Request::from_parts(parts, body))
                .map_err(|err| instant_acme::Error::Other(err.into()))?;
            Ok(BytesResponse::from(response.map(Full::new)))
        })
    }
}

/// Connects to `host:port`, trying each address in turn.
fn connect(host: &str, port: u16) -> anyhow::Result<TcpStream> {
    let addresses = (host.trim_matches(['[', ']']), port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host}"))?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, TIMEOUT) {
            Ok(stream) => {
                stream.set_read_timeout(Some(TIMEOUT))?;
                stream.set_write_timeout(Some(TIMEOUT))?;
                return Ok(stream);
            }
            Err(err) => last = Some(anyhow::Error::new(err).context(format!("{address}"))),
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow::anyhow!("{host} has no address"))
        .context(format!("cannot connect to {host}:{port}")))
}

/// Reads one response from `stream` (whose peer closes after it): its body ends at
/// its Content-Length, at its last chunk, or at the end of the stream.
fn read_response(
    stream: &mut impl io::Read,
    no_body: bool,
) -> anyhow::Result<http::Response<Bytes>> {
    let mut buffer = Vec::with_capacity(8192);
    let mut chunk = [0; 8192];
    loop {
        let read = match stream.read(&mut chunk) {
            Ok(read) => read,
            // A server that closes without TLS's close_notify: what came before counts
            // only if the response says where it ends (checked below).
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(err) => return Err(err).context("cannot read the response"),
        };
        buffer.extend_from_slice(&chunk[..read]);
        ensure!(
            buffer.len() <= MAX_RESPONSE,
            "a response over {MAX_RESPONSE} bytes"
        );
        if let Some(response) = parse(&buffer, no_body, read == 0)? {
            return Ok(response);
        }
        if read == 0 {
            bail!("the connection closed in the middle of the response");
        }
    }
}

/// The response in `bytes` if it is complete (`ended`: nothing more will come).
fn parse(
    bytes: &[u8],
    no_body: bool,
    ended: bool,
) -> anyhow::Result<Option<http::Response<Bytes>>> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut head = httparse::Response::new(&mut headers);
    let start = match head.parse(bytes).context("not an HTTP response")? {
        httparse::Status::Complete(start) => start,
        httparse::Status::Partial => return Ok(None),
    };
    let status = head.code.context("no status")?;
    let mut response = http::Response::builder().status(status);
    let mut length = None;
    let mut chunked = false;
    for header in head.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(header.value).unwrap_or("");
            length = Some(
                text.trim()
                    .parse::<usize>()
                    .context("a bad Content-Length")?,
            );
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = header.value.eq_ignore_ascii_case(b"chunked");
        }
        response = response.header(header.name, header.value);
    }
    let rest = &bytes[start..];
    let body = if no_body || status == 204 || status == 304 || (100..200).contains(&status) {
        Vec::new()
    } else if chunked {
        match dechunk(rest)? {
            Some(body) => body,
            None => return Ok(None),
        }
    } else if let Some(length) = length {
        if rest.len() < length {
            return Ok(None);
        }
        rest[..length].to_vec()
    } else if ended {
        rest.to_vec()
    } else {
        return Ok(None);
    };
    Ok(Some(response.body(Bytes::from(body))?))
}

/// A chunked body (RFC 9112 7.1) decoded, if it is all there.
fn dechunk(mut bytes: &[u8]) -> anyhow::Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    loop {
        let Some(line_end) = bytes.windows(2).position(|pair| pair == b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&bytes[..line_end]).context("a bad chunk size")?;
        let size = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size, 16).context("a bad chunk size")?;
        bytes = &bytes[line_end + 2..];
        if size == 0 {
            // Trailers, then an empty line; none are used.
            return Ok(bytes
                .windows(2)
                .position(|pair| pair == b"\r\n")
                .map(|_| body));
        }
        ensure!(size <= MAX_RESPONSE, "a chunk of {size} bytes");
        if bytes.len() < size + 2 {
            return Ok(None);
        }
        ensure!(
            &bytes[size..size + 2] == b"\r\n",
            "a chunk not followed by CRLF"
        );
        body.extend_from_slice(&bytes[..size]);
        bytes = &bytes[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &[u8], no_body: bool) -> anyhow::Result<http::Response<Bytes>> {
        read_response(&mut io::Cursor::new(text), no_body)
    }

    #[test]
    fn bodies_end_at_their_length_their_last_chunk_or_the_close() {
        let sized = read(
            b"HTTP/1.1 201 Created\r\nReplay-Nonce: abc\r\nContent-Length: 5\r\n\r\nhello and more",
            false,
        )
        .unwrap();
        assert_eq!(sized.status(), 201);
        assert_eq!(sized.headers()["replay-nonce"], "abc");
        assert_eq!(sized.body().as_ref(), b"hello");

        let chunked = read(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(chunked.body().as_ref(), b"hello world");

        let closed = read(b"HTTP/1.1 200 OK\r\n\r\nuntil the end", false).unwrap();
        assert_eq!(closed.body().as_ref(), b"until the end");

        // HEAD (new-nonce): a Content-Length but no body.
        let head = read(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n", true).unwrap();
        assert!(head.body().is_empty());
    }

    #[test]
    fn cut_and_broken_responses_are_errors() {
        for text in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"[..],
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabcd\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-",
            b"SSH-2.0-OpenSSH\r\n\r\n",
            b"",
        ] {
            assert!(
                read(text, false).is_err(),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        let endless = [b'a'; MAX_RESPONSE + 100];
        let mut text = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        text.extend_from_slice(&endless);
        assert!(read(&text, false).is_err(), "bounded");
    }
}
