//! Reloading what a running node reads from files, without a restart: its TLS files (the CA,
//! its certificate and key, the HTTP port's own certificate), its bearer tokens and its client
//! limits.
//!
//! A reload reads a whole new configuration (from a [`ReloadSource`]: `certus serve` re-reads
//! its config file; without one, the configuration the node started with, so that the TLS files
//! are re-read from the same paths), builds everything from it first, and swaps it in only when
//! all of it loaded: a missing file, garbage PEM or a key that is not the certificate's keeps
//! every old setting and says which file and why. New TLS handshakes (gRPC, HTTPS, and peers
//! dialled from now on) use the new certificate; connections already open keep theirs.
//! Changes to settings that are read only at start (addresses, data, Raft, ...) are reported as
//! ignored until a restart.

use std::sync::{Arc, Mutex, PoisonError};

use tracing::{error, info, warn};

use crate::config::NodeConfig;
use crate::edge::client_limits::Limiter;
use crate::edge::security::{Authorizer, Tokens};
use crate::edge::tls::{PeerTls, TlsMaterial};

/// Where a reload reads the node's configuration.
pub trait ReloadSource: Send + Sync {
    /// The configuration as it is now (say which file and why when it cannot be read).
    fn config(&self) -> Result<NodeConfig, String>;
}

impl<F> ReloadSource for F
where
    F: Fn() -> Result<NodeConfig, String> + Send + Sync,
{
    fn config(&self) -> Result<NodeConfig, String> {
        self()
    }
}

/// What a reload did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReloadOutcome {
    /// The reloadable settings that changed and are now in force (`tls.cert_file`, `tokens`,
    /// `client_limits`, ...), in that order; empty when nothing changed.
    pub changed: Vec<String>,
    /// Settings that changed but are read only at start: ignored until a restart.
    pub ignored: Vec<String>,
}

/// The settings and files in force.
struct State {
    config: NodeConfig,
    tls: Option<TlsMaterial>,
    /// The HTTP port's own certificate and key (`[http] cert_file`), as read.
    http_pems: Option<(String, String)>,
}

/// What a reload swaps, on real sockets.
#[cfg(not(madsim))]
struct Live {
    grpc: crate::edge::tls::LiveServerConfig,
    https: Option<crate::edge::tls::LiveServerConfig>,
}

/// A node's reloadable settings, and how to reload them.
pub struct Reloader {
    source: Mutex<Option<Arc<dyn ReloadSource>>>,
    /// Held through a reload: reloads happen one at a time.
    state: Mutex<State>,
    peer_tls: PeerTls,
    authorizer: Option<Authorizer>,
    limiter: Arc<Limiter>,
    #[cfg(not(madsim))]
    live: Option<Live>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("peer_tls", &self.peer_tls)
            .finish_non_exhaustive()
    }
}

/// Everything built from one configuration, before any of it is used.
struct Built {
    tls: Option<TlsMaterial>,
    http_pems: Option<(String, String)>,
    tokens: Tokens,
    #[cfg(not(madsim))]
    grpc: Option<Arc<rustls::ServerConfig>>,
    #[cfg(not(madsim))]
    https: Option<Arc<rustls::ServerConfig>>,
}

fn read(path: &std::path::Path, what: &str) -> Result<String, String> {
    std::fs::read_to_string(path)
        .map_err(|error| format!("{what}: cannot read {}: {error}", path.display()))
}

/// Reads and checks every file `config` names; builds nothing that serves yet.
fn build(config: &NodeConfig) -> Result<Built, String> {
    let tls = config.tls.as_ref().map(TlsMaterial::load).transpose()?;
    let https = tls.as_ref().is_some_and(TlsMaterial::https);
    let http_pems = match (&config.http.cert_file, &config.http.key_file) {
        (Some(cert_file), Some(key_file)) if https => Some((
            read(cert_file, "http.cert_file")?,
            read(key_file, "http.key_file")?,
        )),
        _ => None,
    };
    let tokens = Tokens::new(&config.tokens)?;
    #[cfg(not(madsim))]
    let (grpc, https) = match &tls {
        Some(material) => {
            let grpc = material.grpc_server()?;
            let https = match (&http_pems, https) {
                (_, false) => None,
                (Some((cert, key)), true) => Some(material.https_server_presenting(
                    cert,
                    key,
                    "http.cert_file",
                    "http.key_file",
                )?),
                (None, true) => Some(material.https_server()?),
            };
            (Some(grpc), https)
        }
        None => (None, None),
    };
    Ok(Built {
        tls,
        http_pems,
        tokens,
        #[cfg(not(madsim))]
        grpc,
        #[cfg(not(madsim))]
        https,
    })
}

impl Reloader {
    /// Reads everything `config` names, as a node does at start: a bad file is an error naming
    /// it.
    pub fn new(config: &NodeConfig) -> Result<Reloader, String> {
        let built = build(config)?;
        let peer_tls = built
            .tls
            .as_ref()
            .map(TlsMaterial::peer_tls)
            .unwrap_or_default();
        // Without TLS there is no identity and every call is let through.
        let authorizer = built.tls.as_ref().map(|_| Authorizer::new(built.tokens));
        #[cfg(not(madsim))]
        let live = built.grpc.map(|grpc| Live {
            grpc: crate::edge::tls::LiveServerConfig::new(grpc),
            https: built.https.map(crate::edge::tls::LiveServerConfig::new),
        });
        Ok(Reloader {
            source: Mutex::new(None),
            state: Mutex::new(State {
                config: config.clone(),
                tls: built.tls,
                http_pems: built.http_pems,
            }),
            peer_tls,
            authorizer,
            limiter: Arc::new(Limiter::new(config.client_limits)),
            #[cfg(not(madsim))]
            live,
        })
    }

    /// How peers are dialled: shared, a reload changes it for every holder.
    pub fn peer_tls(&self) -> &PeerTls {
        &self.peer_tls
    }

    /// The authorizer of both ports (none without TLS): a reload changes its tokens.
    pub fn authorizer(&self) -> Option<&Authorizer> {
        self.authorizer.as_ref()
    }

    /// The client limits' counts: a reload changes the limits.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The gRPC server's TLS, if it has TLS.
    #[cfg(not(madsim))]
    pub fn grpc_tls(&self) -> Option<crate::edge::tls::LiveServerConfig> {
        self.live.as_ref().map(|live| live.grpc.clone())
    }

    /// The HTTP port's TLS, if it speaks HTTPS.
    #[cfg(not(madsim))]
    pub fn https(&self) -> Option<crate::edge::tls::LiveServerConfig> {
        self.live.as_ref().and_then(|live| live.https.clone())
    }

    /// Reloads from `source` from now on (instead of the configuration the node started with).
    pub fn set_source(&self, source: Arc<dyn ReloadSource>) {
        *self.source.lock().unwrap_or_else(PoisonError::into_inner) = Some(source);
    }

    /// Reads the configuration from the source and reloads it ([`Reloader::reload_config`]).
    pub fn reload(&self) -> Result<ReloadOutcome, String> {
        let source = self
            .source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let config = match source {
            Some(source) => source.config(),
            None => Ok(self.state().config.clone()),
        };
        match config {
            Ok(config) => self.reload_config(&config),
            Err(reason) => {
                error!(%reason, "reload failed; the old certificates, tokens and limits stay");
                Err(reason)
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the reloadable settings of `config` (re-reading every file it names) and uses
    /// them from now on; or, if any of it does not load, changes nothing and says why. Every
    /// outcome is logged.
    pub fn reload_config(&self, config: &NodeConfig) -> Result<ReloadOutcome, String> {
        let result = self.swap(config);
        match &result {
            Ok(outcome) => {
                if !outcome.ignored.is_empty() {
                    warn!(
                        ignored = ?outcome.ignored,
                        "reload: these settings are read only at start; ignored until a restart"
                    );
                }
                if outcome.changed.is_empty() {
                    info!("reloaded: nothing changed");
                } else {
                    info!(changed = ?outcome.changed, "reloaded");
                }
            }
            Err(reason) => {
                error!(%reason, "reload failed; the old certificates, tokens and limits stay");
            }
        }
        result
    }

    fn swap(&self, config: &NodeConfig) -> Result<ReloadOutcome, String> {
        let mut state = self.state();
        let effective = reloadable_part(&state.config, config);
        let ignored = differences(&effective, config)?;
        effective.validate()?;
        let built = build(&effective)?;
        let mut changed = Vec::new();
        if let (Some(old), Some(new)) = (&state.tls, &built.tls) {
            let names = ["tls.ca_cert_file", "tls.cert_file", "tls.key_file"];
            for ((old, new), name) in old.pems().iter().zip(new.pems()).zip(names) {
                if *old != new {
                    changed.push(name.to_owned());
                }
            }
        }
        if state.http_pems != built.http_pems {
            changed.push("http.cert_file".to_owned());
        }
        if state.config.tokens != effective.tokens {
            changed.push("tokens".to_owned());
        }
        if state.config.client_limits != effective.client_limits {
            changed.push("client_limits".to_owned());
        }
        // Nothing can fail from here on.
        #[cfg(not(madsim))]
        if let Some(live) = &self.live {
            if let Some(grpc) = built.grpc {
                live.grpc.replace(grpc);
            }
            if let (Some(https), Some(new)) = (&live.https, built.https) {
                https.replace(new);
            }
        }
        if let Some(material) = &built.tls {
            self.peer_tls.replace(&material.peer_tls());
        }
        if let Some(authorizer) = &self.authorizer {
            authorizer.replace_tokens(built.tokens);
        }
        self.limiter.set_limits(effective.client_limits);
        *state = State {
            config: effective,
            tls: built.tls,
            http_pems: built.http_pems,
        };
        Ok(ReloadOutcome { changed, ignored })
    }
}

/// `current` with the reloadable settings of `new`: the TLS files' paths (whether TLS is on,
/// and HTTPS, are kept), the HTTP port's certificate files, the tokens and the client limits.
fn reloadable_part(current: &NodeConfig, new: &NodeConfig) -> NodeConfig {
    let mut effective = current.clone();
    if let (Some(tls), Some(new_tls)) = (&mut effective.tls, &new.tls) {
        tls.ca_cert_file.clone_from(&new_tls.ca_cert_file);
        tls.cert_file.clone_from(&new_tls.cert_file);
        tls.key_file.clone_from(&new_tls.key_file);
    }
    effective.http.cert_file.clone_from(&new.http.cert_file);
    effective.http.key_file.clone_from(&new.http.key_file);
    effective.tokens.clone_from(&new.tokens);
    effective.client_limits = new.client_limits;
    effective
}

/// The top-level settings in which `a` and `b` differ.
fn differences(a: &NodeConfig, b: &NodeConfig) -> Result<Vec<String>, String> {
    let as_map = |config: &NodeConfig| match serde_json::to_value(config) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err("the configuration is not a table".to_owned()),
        Err(error) => Err(format!("the configuration: {error}")),
    };
    let (a, b) = (as_map(a)?, as_map(b)?);
    let mut names: Vec<String> = a
        .iter()
        .filter(|(name, value)| b.get(name.as_str()) != Some(value))
        .map(|(name, _)| name.clone())
        .collect();
    names.extend(b.keys().filter(|name| !a.contains_key(*name)).cloned());
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NodeConfig {
        NodeConfig::new(
            1,
            "127.0.0.1:1".parse().expect("addr"),
            "127.0.0.1:2".parse().expect("addr"),
            "/tmp/unused".into(),
        )
    }

    #[test]
    fn only_settings_read_at_start_are_reported_ignored() {
        let current = config();
        let mut new = config();
        new.client_limits.burst += 1;
        new.tick_interval_ms += 1;
        new.http.header_read_timeout_ms += 1;
        let effective = reloadable_part(&current, &new);
        assert_eq!(effective.client_limits, new.client_limits);
        assert_eq!(effective.tick_interval_ms, current.tick_interval_ms);
        assert_eq!(
            differences(&effective, &new).expect("differences"),
            vec!["http".to_owned(), "tick_interval_ms".to_owned()]
        );
        assert!(
            differences(&effective, &effective)
                .expect("none")
                .is_empty()
        );
    }

    #[test]
    fn new_limits_are_swapped_in_and_bad_tokens_change_nothing() {
        let reloader = Reloader::new(&config()).expect("starts");
        let mut new = config();
        new.client_limits.requests_per_second = 7;
        let outcome = reloader.reload_config(&new).expect("reloads");
        assert_eq!(outcome.changed, vec!["client_limits".to_owned()]);
        assert!(outcome.ignored.is_empty());
        assert_eq!(reloader.limiter().limits().requests_per_second, 7);

        let mut bad = new.clone();
        bad.client_limits.requests_per_second = 9;
        bad.tokens = vec![crate::edge::security::TokenEntry {
            name: "x".into(),
            roles: vec![],
            sha256: "not hex".into(),
        }];
        let error = reloader.reload_config(&bad).expect_err("refused");
        assert!(error.starts_with("tokens"), "{error}");
        assert_eq!(reloader.limiter().limits().requests_per_second, 7);
        let again = reloader.reload_config(&new).expect("reloads");
        assert!(again.changed.is_empty(), "{again:?}");
    }
}
