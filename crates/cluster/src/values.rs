//! Values several nodes change together: read a set of keys, then replace them all
//! only if none changed since (one Lua script, atomic in the store). Private mode's
//! ledger keeps its pairs this way in a cluster, so a client announcing to two nodes
//! is credited by one.
//!
//! Keys must all live on one store (a single Redis or Valkey, or one primary with
//! replicas); a sharded Redis Cluster would refuse scripts over keys of several slots.

use crate::resp::Reply;
use crate::store::{Connection, StoreAddress};

/// Compares every key with what the caller read, then sets or deletes them all.
/// `ARGV[1]` is the time to live in seconds, then one expected value per key, then one
/// new value per key; the empty string stands for "no value" both ways.
const COMPARE_AND_REPLACE: &[u8] = br"
local count = #KEYS
for i = 1, count do
  local current = redis.call('GET', KEYS[i])
  if (current or '') ~= ARGV[i + 1] then
    return 0
  end
end
for i = 1, count do
  local value = ARGV[count + i + 1]
  if value == '' then
    redis.call('DEL', KEYS[i])
  else
    redis.call('SET', KEYS[i], value, 'EX', ARGV[1])
  end
end
return 1
";

/// A connection used for [`load`](Self::load) and
/// [`replace`](Self::replace), opened when first needed and again after a failure.
#[derive(Debug)]
pub struct SharedValues {
    store: StoreAddress,
    connection: Option<Connection>,
}

impl SharedValues {
    /// Values in `store`; nothing is connected yet.
    pub fn new(store: StoreAddress) -> Self {
        Self {
            store,
            connection: None,
        }
    }

    /// The value of each of `keys`, in order; `None` where there is none.
    pub fn load(&mut self, keys: &[Vec<u8>]) -> Result<Vec<Option<Vec<u8>>>, String> {
        let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + 1);
        args.push(b"MGET");
        args.extend(keys.iter().map(Vec::as_slice));
        let reply = self.command(&args)?;
        let values = reply.into_array().map_err(|err| format!("MGET: {err:?}"))?;
        if values.len() != keys.len() {
            return Err(format!(
                "MGET of {} keys answered {} values",
                keys.len(),
                values.len()
            ));
        }
        values
            .into_iter()
            .map(|value| match value {
                Reply::Nil => Ok(None),
                Reply::Bulk(bytes) if bytes.is_empty() => Ok(None),
                Reply::Bulk(bytes) => Ok(Some(bytes)),
                other => Err(format!("MGET answered {other:?}")),
            })
            .collect()
    }

    /// Sets `new` for `keys` (`None`, or an empty value, deletes), each to expire
    /// `ttl` seconds later, if and only if each key still holds `expected`: all or
    /// nothing. `Ok(false)` when one changed, and nothing was set.
    pub fn replace(
        &mut self,
        keys: &[Vec<u8>],
        expected: &[Option<Vec<u8>>],
        new: &[Option<Vec<u8>>],
        ttl: u64,
    ) -> Result<bool, String> {
        if keys.len() != expected.len() || keys.len() != new.len() {
            return Err("as many expected and new values as keys".into());
        }
        let count = keys.len().to_string();
        let ttl = ttl.max(1).to_string();
        let mut args: Vec<&[u8]> = Vec::with_capacity(4 + 3 * keys.len());
        args.extend([b"EVAL".as_slice(), COMPARE_AND_REPLACE, count.as_bytes()]);
        args.extend(keys.iter().map(Vec::as_slice));
        args.push(ttl.as_bytes());
        args.extend(expected.iter().map(value_or_empty));
        args.extend(new.iter().map(value_or_empty));
        match self.command(&args)? {
            Reply::Integer(1) => Ok(true),
            Reply::Integer(0) => Ok(false),
            other => Err(format!("the compare-and-replace script answered {other:?}")),
        }
    }

    /// Sends one command; a connection that failed is dropped (reopened next time).
    fn command(&mut self, args: &[&[u8]]) -> Result<Reply, String> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => self.connection.insert(
                Connection::open(&self.store)
                    .map_err(|err| format!("{}: {err:#}", self.store.address))?,
            ),
        };
        match connection.command(args) {
            Ok(Reply::Error(message)) => Err(format!("{}: {message}", self.store.address)),
            Ok(reply) => Ok(reply),
            Err(err) => {
                self.connection = None;
                Err(format!("{}: {err:#}", self.store.address))
            }
        }
    }
}

/// A value as the script takes it: no value is the empty string.
fn value_or_empty(value: &Option<Vec<u8>>) -> &[u8] {
    value.as_deref().unwrap_or_default()
}
