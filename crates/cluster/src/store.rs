//! One blocking connection to the store (Redis or Valkey), with timeouts on
//! everything, so that a store that hangs costs a cluster thread a bounded wait and
//! never a request.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::resp::{self, Parsed, Reply};

/// Where the store is and how to log in.
#[derive(Clone, Debug)]
pub struct StoreAddress {
    /// `host:port`.
    pub address: String,
    /// ACL user name; empty for `AUTH password` alone.
    pub username: String,
    /// Password; empty for none.
    pub password: String,
    /// Database number (`SELECT`).
    pub database: u32,
    /// Longest wait to connect, and for any reply beyond a blocking read's own wait.
    pub timeout: Duration,
}

/// A logged-in connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    buffer: Vec<u8>,
    timeout: Duration,
}

impl Connection {
    /// Connects, logs in and selects the database.
    pub fn open(store: &StoreAddress) -> anyhow::Result<Self> {
        let addrs: Vec<SocketAddr> = store
            .address
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {}", store.address))?
            .collect();
        let mut last_error = None;
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, store.timeout) {
                Ok(stream) => {
                    let mut connection = Self::over(stream, store.timeout)?;
                    connection.log_in(store)?;
                    return Ok(connection);
                }
                Err(error) => last_error = Some(error),
            }
        }
        match last_error {
            Some(error) => {
                Err(error).with_context(|| format!("cannot connect to {}", store.address))
            }
            None => bail!("{} resolves to no address", store.address),
        }
    }

    fn over(stream: TcpStream, timeout: Duration) -> anyhow::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_read_timeout(Some(timeout))?;
        Ok(Self {
            stream,
            buffer: Vec::with_capacity(16 << 10),
            timeout,
        })
    }

    fn log_in(&mut self, store: &StoreAddress) -> anyhow::Result<()> {
        if !store.password.is_empty() {
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if !store.username.is_empty() {
                args.push(store.username.as_bytes());
            }
            args.push(store.password.as_bytes());
            self.command(&args)?
                .ok()
                .context("the store refused the login")?;
        }
        if store.database != 0 {
            let database = store.database.to_string();
            self.command(&[b"SELECT", database.as_bytes()])?
                .ok()
                .context("the store refused the database number")?;
        }
        Ok(())
    }

    /// Sends one command and reads its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Reply> {
        let mut out = Vec::new();
        resp::encode(args, &mut out);
        self.stream
            .write_all(&out)
            .context("cannot write to the store")?;
        self.read_reply(self.timeout)
    }

    /// Sends commands already encoded ([`resp::encode`]) in one write and reads
    /// `count` replies: one round trip for all of them.
    pub fn pipeline(&mut self, encoded: &[u8], count: usize) -> anyhow::Result<Vec<Reply>> {
        self.stream
            .write_all(encoded)
            .context("cannot write to the store")?;
        (0..count).map(|_| self.read_reply(self.timeout)).collect()
    }

    /// Sends a blocking command (`XREAD BLOCK ms …`) that may take `wait` to answer.
    pub fn blocking(&mut self, args: &[&[u8]], wait: Duration) -> anyhow::Result<Reply> {
        let mut out = Vec::new();
        resp::encode(args, &mut out);
        self.stream
            .write_all(&out)
            .context("cannot write to the store")?;
        self.read_reply(wait + self.timeout)
    }

    fn read_reply(&mut self, timeout: Duration) -> anyhow::Result<Reply> {
        self.stream.set_read_timeout(Some(timeout))?;
        let mut chunk = vec![0u8; 64 << 10];
        loop {
            // Measure first, build once: a large reply arrives in many reads.
            if let Some(length) = resp::complete_length(&self.buffer)? {
                let Parsed::Reply(reply, used) = resp::parse(&self.buffer[..length])? else {
                    bail!("a reply measured whole did not parse");
                };
                self.buffer.drain(..used);
                return Ok(reply);
            }
            let read = self
                .stream
                .read(&mut chunk)
                .context("no reply from the store")?;
            if read == 0 {
                bail!("the store closed the connection");
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}
