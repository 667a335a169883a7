//! A real ACME CA for the trackers' ACME tests: Debian's `pebble` (Let's Encrypt's
//! RFC 8555 test server) and `pebble-challtestsrv` as its DNS server, answering every
//! name with 127.0.0.1 unless told otherwise, on free loopback ports. Stopped (by
//! PID) when dropped. `./scripts/test.sh` installs the `pebble` package.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::eventually;

/// A running pebble and its DNS server.
#[derive(Debug)]
pub struct Pebble {
    dir: PathBuf,
    config: PathBuf,
    acme_port: u16,
    management_port: u16,
    dns_port: u16,
    dns_management_port: u16,
    ca: Option<Child>,
    dns: Option<Child>,
}

impl Pebble {
    /// Starts a CA that validates TLS-ALPN-01 challenges on port `tls_port` (the
    /// tracker's) and issues certificates valid for `validity` seconds.
    pub fn start(tls_port: u16, validity: u64) -> Self {
        let dir =
            std::env::temp_dir().join(format!("shoal-pebble-{}-{tls_port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for pebble");
        write_api_certificate(&dir);
        let (acme_port, management_port, dns_management_port) =
            (free_tcp_port(), free_tcp_port(), free_tcp_port());
        let dns_port = free_tcp_and_udp_port();
        let config = dir.join("pebble.json");
        let json = format!(
            r#"{{"pebble": {{"listenAddress": "127.0.0.1:{acme_port}",
                "managementListenAddress": "127.0.0.1:{management_port}",
                "certificate": "{api}/api.pem", "privateKey": "{api}/api.key",
                "httpPort": 5002, "tlsPort": {tls_port}, "ocspResponderURL": "",
                "externalAccountBindingRequired": false,
                "certificateValidityPeriod": {validity}}}}}"#,
            api = dir.display(),
        );
        std::fs::write(&config, json).expect("pebble's config");
        let mut pebble = Self {
            dir,
            config,
            acme_port,
            management_port,
            dns_port,
            dns_management_port,
            ca: None,
            dns: None,
        };
        pebble.dns = Some(spawn(
            Command::new("pebble-challtestsrv")
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-management", &format!("127.0.0.1:{dns_management_port}")]),
            &pebble.dir.join("challtestsrv.log"),
        ));
        assert!(
            eventually(|| TcpStream::connect(("127.0.0.1", dns_management_port)).is_ok()),
            "pebble-challtestsrv did not start"
        );
        pebble.start_ca();
        pebble
    }

    /// The ACME directory URL.
    pub fn directory_url(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.acme_port)
    }

    /// The PEM file of the CA that signed pebble's own HTTPS certificate: what an
    /// ACME client must trust to talk to it.
    pub fn api_roots(&self) -> PathBuf {
        self.dir.join("api-root.pem")
    }

    /// The root of the certificates the CA issues, in DER (a new one at each start of
    /// the CA), fetched from its management interface's `/roots/0`.
    pub fn issuing_root(&self) -> Vec<u8> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, ServerName};
        let api_root = CertificateDer::from_pem_file(self.api_roots()).expect("the API root");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(api_root).expect("a usable root");
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").expect("a name");
        let tls =
            rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("a TLS client");
        let tcp = TcpStream::connect(("127.0.0.1", self.management_port)).expect("pebble");
        let mut stream = rustls::StreamOwned::new(tls, tcp);
        stream
            .write_all(b"GET /roots/0 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .expect("a request to pebble");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let text = String::from_utf8_lossy(&answer);
        let (_, body) = text.split_once("\r\n\r\n").expect("a response from pebble");
        CertificateDer::from_pem_slice(body.as_bytes())
            .expect("a PEM certificate from pebble")
            .to_vec()
    }

    /// Stops the CA (the DNS server stays): clients find nothing on its port.
    pub fn stop_ca(&mut self) {
        if let Some(child) = self.ca.take() {
            stop(child);
        }
    }

    /// Starts the CA (again), with new keys and no accounts, and waits until it
    /// listens.
    pub fn start_ca(&mut self) {
        self.stop_ca();
        self.ca = Some(spawn(
            Command::new("pebble")
                .arg("-config")
                .arg(&self.config)
                .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
                .arg("-strict=false")
                // No random pauses before validating, no nonces refused on purpose,
                // no authorizations reused: every order validates.
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0")
                .env("PEBBLE_AUTHZREUSE", "0"),
            &self.dir.join("pebble.log"),
        ));
        let port = self.acme_port;
        assert!(
            eventually(|| TcpStream::connect(("127.0.0.1", port)).is_ok()),
            "pebble did not start: {}",
            std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
        );
    }

    /// Makes the DNS server answer `name` with `address` (IPv4).
    pub fn map_name(&self, name: &str, address: &str) {
        let body = format!(r#"{{"host":"{name}.","addresses":["{address}"]}}"#);
        let mut stream =
            TcpStream::connect(("127.0.0.1", self.dns_management_port)).expect("challtestsrv");
        write!(
            stream,
            "POST /add-a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("a request to challtestsrv");
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "challtestsrv: {answer}");
    }

    /// What pebble logged, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.stop_ca();
        if let Some(child) = self.dns.take() {
            stop(child);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts `command` with its output into `log`.
fn spawn(command: &mut Command, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("a log file");
    let err = out.try_clone().expect("a log file");
    command
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect(
            "cannot run pebble: install it (Debian: apt-get install pebble; ./scripts/test.sh does)",
        )
}

/// Stops a child we started (SIGTERM by PID) and reaps it.
fn stop(mut child: Child) {
    // SAFETY: kill(2) on the PID of a child we started and have not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}

fn free_tcp_port() -> u16 {
    let probe = TcpListener::bind("127.0.0.1:0").expect("a free port");
    probe.local_addr().expect("its address").port()
}

/// A port free for both TCP and UDP (DNS listens on both).
fn free_tcp_and_udp_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("a free UDP port");
        let port = udp.local_addr().expect("its address").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Writes a test CA (`api-root.pem`) and pebble's HTTPS certificate for 127.0.0.1 and
/// localhost signed by it (`api.pem`, `api.key`).
fn write_api_certificate(dir: &Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut root = CertificateParams::new(Vec::<String>::new()).expect("root params");
    root.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    root.distinguished_name
        .push(DnType::CommonName, "shoal test root for pebble");
    let root =
        CertifiedIssuer::self_signed(root, KeyPair::generate().expect("a key")).expect("a root");
    let key = KeyPair::generate().expect("a key");
    let leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params")
        .signed_by(&key, &root)
        .expect("a leaf");
    std::fs::write(dir.join("api-root.pem"), root.pem()).expect("the root");
    std::fs::write(dir.join("api.pem"), leaf.pem()).expect("the leaf");
    std::fs::write(dir.join("api.key"), key.serialize_pem()).expect("the key");
}
