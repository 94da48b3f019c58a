//! Where a delivery may go. A webhook URL is chosen by whoever asks the operator to
//! register it, so by default it must be `https` and reach only public addresses: never
//! this host, the private network, link-local addresses or a cloud's metadata service. The
//! name is checked when the endpoint is registered and again each time a delivery
//! connects ([`GuardedResolver`]), since DNS can answer differently later (rebinding).
//! `LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1` lifts both rules, for receivers on a
//! private network or this machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use url::{Host, Url};

/// Why a URL is not a place deliveries may go.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{url:?} is not a URL: {source}")]
    NotAUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{0} is not an https URL (plain http is allowed only with LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1)")]
    NotHttps(String),
    #[error("{0} is neither https nor http")]
    Scheme(String),
    #[error("{0} names no host")]
    NoHost(String),
    #[error("{0} carries a user name or password: put credentials in the receiver's check of the signature instead")]
    Credentials(String),
    #[error(
        "{host} resolves to {address}, a {kind} address; deliveries go only to public addresses unless \
         LECTERN_WEBHOOKS_ALLOW_PRIVATE_TARGETS=1"
    )]
    Forbidden { host: String, address: IpAddr, kind: &'static str },
    #[error("{host} does not resolve: {source}")]
    Unresolved {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} resolves to no address")]
    NoAddress(String),
}

/// Whether private targets (and plain http) are allowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetPolicy {
    pub allow_private: bool,
}

impl TargetPolicy {
    /// `url` parsed and checked, its name resolved and every address it resolves to
    /// checked (at registration).
    pub async fn check(self, url: &str) -> Result<Url, TargetError> {
        let parsed = self.check_form(url)?;
        if !self.allow_private {
            let host = host_text(&parsed);
            let port = parsed.port_or_known_default().unwrap_or(443);
            let addresses = resolve(&host, port).await?;
            for address in addresses {
                refuse_if_forbidden(&host, address.ip())?;
            }
        }
        Ok(parsed)
    }

    /// The checks that need no lookup: scheme, host, no credentials, and an address
    /// written in the URL (which no resolver sees).
    pub fn check_form(self, url: &str) -> Result<Url, TargetError> {
        let parsed = Url::parse(url).map_err(|source| TargetError::NotAUrl { url: url.to_owned(), source })?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_private => {}
            "http" => return Err(TargetError::NotHttps(url.to_owned())),
            _ => return Err(TargetError::Scheme(url.to_owned())),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(TargetError::Credentials(url.to_owned()));
        }
        let literal = match parsed.host() {
            None => return Err(TargetError::NoHost(url.to_owned())),
            Some(Host::Domain(_)) => None,
            Some(Host::Ipv4(address)) => Some(IpAddr::V4(address)),
            Some(Host::Ipv6(address)) => Some(IpAddr::V6(address)),
        };
        if let (Some(address), false) = (literal, self.allow_private) {
            refuse_if_forbidden(&host_text(&parsed), address)?;
        }
        Ok(parsed)
    }
}

fn host_text(url: &Url) -> String {
    url.host_str().unwrap_or_default().to_owned()
}

async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, TargetError> {
    let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|source| TargetError::Unresolved { host: host.to_owned(), source })?
        .collect();
    if addresses.is_empty() {
        return Err(TargetError::NoAddress(host.to_owned()));
    }
    Ok(addresses)
}

fn refuse_if_forbidden(host: &str, address: IpAddr) -> Result<(), TargetError> {
    match forbidden(address) {
        Some(kind) => Err(TargetError::Forbidden { host: host.to_owned(), address, kind }),
        None => Ok(()),
    }
}

/// What kind of non-public address `address` is, if it is one.
pub fn forbidden(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    }
}

fn forbidden_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = address.octets();
    Some(match () {
        () if address == Ipv4Addr::new(169, 254, 169, 254) || address == Ipv4Addr::new(100, 100, 100, 200) => {
            "cloud metadata"
        }
        () if address.is_loopback() => "loopback",
        () if address.is_private() => "private",
        () if address.is_link_local() => "link-local",
        () if address.is_unspecified() || a == 0 => "unspecified",
        () if address.is_broadcast() || address.is_multicast() || a >= 240 => "multicast or reserved",
        // 100.64.0.0/10: carrier-grade NAT, private to the provider's network.
        () if a == 100 && (64..128).contains(&b) => "shared (carrier-grade NAT)",
        // 198.18.0.0/15: benchmarking networks.
        () if a == 198 && (b == 18 || b == 19) => "benchmarking",
        () if address.is_documentation() => "documentation",
        () => return None,
    })
}

fn forbidden_v6(address: Ipv6Addr) -> Option<&'static str> {
    let first = address.segments()[0];
    Some(match () {
        () if address == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) => "cloud metadata",
        () if address.is_loopback() => "loopback",
        () if address.is_unspecified() => "unspecified",
        () if address.is_multicast() => "multicast or reserved",
        () if first & 0xfe00 == 0xfc00 => "private (unique local)",
        () if first & 0xffc0 == 0xfe80 => "link-local",
        // 64:ff9b::/96 and the like embed IPv4 addresses a NAT64 gateway would reach.
        () if first == 0x0064 => "NAT64",
        () if first == 0x2001 && address.segments()[1] == 0x0db8 => "documentation",
        () => return None,
    })
}

/// The resolver deliveries connect through: the system's, with every non-public
/// address dropped unless private targets are allowed; a name left with none fails.
#[derive(Debug, Default)]
pub struct GuardedResolver {
    pub policy: TargetPolicy,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addresses = resolve(&host, 0).await?;
            let mut refused = None;
            let allowed: Vec<SocketAddr> = addresses
                .into_iter()
                .filter(|address| match (policy.allow_private, forbidden(address.ip())) {
                    (false, Some(kind)) => {
                        refused = Some(TargetError::Forbidden { host: host.clone(), address: address.ip(), kind });
                        false
                    }
                    _ => true,
                })
                .collect();
            match (allowed.is_empty(), refused) {
                (true, Some(refused)) => Err(Box::new(refused) as Box<dyn std::error::Error + Send + Sync>),
                (true, None) => Err(Box::new(TargetError::NoAddress(host)) as Box<dyn std::error::Error + Send + Sync>),
                (false, _) => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_private_link_local_and_metadata_addresses_are_refused_and_public_ones_are_not() {
        for (address, kind) in [
            ("127.0.0.1", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("fd00:ec2::254", "cloud metadata"),
            ("fc00::1", "private (unique local)"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("0.0.0.0", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
        ] {
            assert_eq!(forbidden(address.parse().expect("address")), Some(kind), "{address}");
        }
        for address in ["1.1.1.1", "93.184.215.14", "2606:4700:4700::1111"] {
            assert_eq!(forbidden(address.parse().expect("address")), None, "{address}");
        }
    }

    #[test]
    fn only_https_urls_without_credentials_pass_unless_private_targets_are_allowed() {
        let strict = TargetPolicy::default();
        assert!(matches!(strict.check_form("http://example.com/hook"), Err(TargetError::NotHttps(_))));
        assert!(matches!(strict.check_form("ftp://example.com/hook"), Err(TargetError::Scheme(_))));
        assert!(matches!(strict.check_form("https://user:pw@example.com/"), Err(TargetError::Credentials(_))));
        assert!(matches!(strict.check_form("https://127.0.0.1/"), Err(TargetError::Forbidden { .. })));
        assert!(matches!(strict.check_form("https://[::1]:8443/"), Err(TargetError::Forbidden { .. })));
        assert!(strict.check_form("https://example.com/hook").is_ok());
        let open = TargetPolicy { allow_private: true };
        assert!(open.check_form("http://127.0.0.1:9000/hook").is_ok());
        assert!(matches!(open.check_form("ftp://127.0.0.1/"), Err(TargetError::Scheme(_))));
    }
}
