//! The settings that say how buyers reach this server through a proxy: its public
//! origin and the proxies whose forwarded headers are believed. What they change is
//! [`crate::http::proxy`]'s.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use axum::http::Uri;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The origin buyers' browsers use (`--public-origin`): `http` or `https`, a host and
/// an optional port, nothing else (`https://tickets.example.com`). The default port of
/// the scheme is dropped, as browsers drop it from `Origin`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct PublicOrigin {
    https: bool,
    /// Host and port, lowercase, without the scheme's default port.
    authority: String,
}

impl FromStr for PublicOrigin {
    type Err = String;

    /// Errors: a text that is not `http(s)://host[:port]` with at most a `/` after it.
    fn from_str(text: &str) -> Result<Self, String> {
        let refuse = || format!("{text:?} is not an origin such as https://tickets.example.com");
        let uri: Uri = text.parse().map_err(|_| refuse())?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(refuse()),
        };
        let authority = uri.authority().ok_or_else(refuse)?;
        // A port, if any, is one a browser can send: 1 to 65535, digits only.
        let authority = authority.as_str();
        let port_ok = match authority.rsplit_once(':') {
            Some((_, port)) if !port.ends_with(']') => {
                port.parse::<u16>().is_ok_and(|port| port > 0)
            }
            _ => true,
        };
        if !port_ok
            || authority.contains('@')
            || text.contains('#')
            || !matches!(uri.path(), "" | "/")
            || uri.query().is_some()
        {
            return Err(refuse());
        }
        Ok(PublicOrigin {
            https,
            authority: without_default_port(https, authority),
        })
    }
}

impl fmt::Display for PublicOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority)
    }
}

impl From<PublicOrigin> for String {
    fn from(origin: PublicOrigin) -> String {
        origin.to_string()
    }
}

impl TryFrom<String> for PublicOrigin {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

/// The peers whose forwarded headers are believed (`--trusted-proxies`): addresses or
/// networks, comma-separated (`127.0.0.1, 10.0.0.0/8`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Whether `peer` is one of them. An IPv4 peer seen by a dual-stack listener
    /// (`::ffff:10.0.0.7`) is its IPv4 address.
    pub fn contains(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.0.iter().any(|net| net.contains(&peer))
    }
}

impl FromStr for TrustedProxies {
    type Err = String;

    /// Errors: an entry that is neither an IP address nor a network (`10.0.0.0/8`).
    fn from_str(text: &str) -> Result<Self, String> {
        let nets = text
            .split(',')
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(|entry| {
                entry
                    .parse::<IpNet>()
                    .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| format!("{entry:?} is not an IP address or a network"))
            })
            .collect::<Result<_, _>>()?;
        Ok(TrustedProxies(nets))
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nets: Vec<String> = self.0.iter().map(IpNet::to_string).collect();
        f.write_str(&nets.join(","))
    }
}

impl From<TrustedProxies> for String {
    fn from(proxies: TrustedProxies) -> String {
        proxies.to_string()
    }
}

impl TryFrom<String> for TrustedProxies {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl PublicOrigin {
    /// Whether the scheme is https.
    pub fn https(&self) -> bool {
        self.https
    }

    /// Host and port, lowercase, without the scheme's default port.
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

/// `authority` without `:443` (https) or `:80` (http), as browsers write origins.
pub fn without_default_port(https: bool, authority: &str) -> String {
    let default = if https { ":443" } else { ":80" };
    authority
        .strip_suffix(default)
        .unwrap_or(authority)
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_origin_is_scheme_host_and_port_and_nothing_else() {
        let origin: PublicOrigin = "https://Tickets.Example.com:443/".parse().unwrap();
        assert_eq!(origin.to_string(), "https://tickets.example.com");
        let origin: PublicOrigin = "http://127.0.0.1:8080".parse().unwrap();
        assert_eq!(origin.to_string(), "http://127.0.0.1:8080");
        for bad in [
            "tickets.example.com",
            "ftp://tickets.example.com",
            "https://tickets.example.com/shop",
            "https://user@tickets.example.com",
            "https://tickets.example.com/?a=1",
            "https://tickets.example.com#top",
            "https://tickets.example.com:",
            "https://tickets.example.com:abc",
            "https://tickets.example.com:0",
            "https://tickets.example.com:99999",
        ] {
            assert!(bad.parse::<PublicOrigin>().is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn trusted_proxies_are_addresses_or_networks() {
        let proxies: TrustedProxies = "127.0.0.1, 10.0.0.0/8,::1".parse().unwrap();
        assert!(proxies.contains("10.0.0.7".parse().unwrap()));
        assert!(!proxies.contains("203.0.113.9".parse().unwrap()));
        assert!(
            proxies.contains("::ffff:10.0.0.7".parse().unwrap()),
            "dual-stack"
        );
        assert_eq!(proxies.to_string(), "127.0.0.1/32,10.0.0.0/8,::1/128");
        assert_eq!(
            "".parse::<TrustedProxies>().unwrap(),
            TrustedProxies::default()
        );
        assert!("10.0.0.0/33".parse::<TrustedProxies>().is_err());
        assert!("proxy.internal".parse::<TrustedProxies>().is_err());
    }
}
