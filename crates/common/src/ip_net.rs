//! IP networks in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`, or one address), as
//! config values.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A network: an address and how many of its leading bits must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpNet {
    addr: IpAddr,
    prefix_len: u8,
}

impl IpNet {
    /// Whether `ip` is in this network (an IPv4 address mapped into IPv6 counts as
    /// IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for IpNet {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an IP address or network (a.b.c.d/n)"))?;
        let most = if addr.is_ipv4() { 32 } else { 128 };
        let prefix_len = match prefix {
            None => most,
            Some(prefix) => prefix
                .parse::<u8>()
                .ok()
                .filter(|&len| len <= most)
                .ok_or_else(|| format!("{text:?}: the prefix length must be 0 to {most}"))?,
        };
        Ok(Self { addr, prefix_len })
    }
}

impl fmt::Display for IpNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix_len)
    }
}

impl Serialize for IpNet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for IpNet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl shoal_toml_config::TomlConfig for IpNet {
    fn docs() -> shoal_toml_config::Docs {
        shoal_toml_config::Docs::Leaf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_contain_their_addresses() {
        assert!(net("10.0.0.0/8").contains(ip("10.200.1.1")));
        assert!(!net("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(net("127.0.0.1").contains(ip("127.0.0.1")));
        assert!(!net("127.0.0.1").contains(ip("127.0.0.2")));
        assert!(net("::ffff:0:0/0").contains(ip("2001:db8::1")));
        assert!(net("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!net("2001:db8::/32").contains(ip("192.0.2.1")));
        assert!(
            net("192.0.2.0/24").contains(ip("::ffff:192.0.2.9")),
            "mapped"
        );
        assert!(net("0.0.0.0/0").contains(ip("203.0.113.1")));
    }

    #[test]
    fn bad_text_is_explained_and_good_text_round_trips() {
        assert!(
            "10.0.0.0/33"
                .parse::<IpNet>()
                .unwrap_err()
                .contains("0 to 32")
        );
        assert!("nginx".parse::<IpNet>().unwrap_err().contains("not an IP"));
        assert_eq!(net("10.1.0.0/16").to_string(), "10.1.0.0/16");
        assert_eq!(net("::1").to_string(), "::1/128");
    }
}
