//! The server's signing secrets: `--secret` signs, and `--accepted-secrets` verify too.
//!
//! Everything the server signs is checked against each of them, the current one first:
//! the buyer cookie and the had-hold cookies ([`crate::http::buyer`]), the waiting-room
//! ticket (`crate::waiting_room`'s ticket), the CSRF form tokens ([`crate::http::csrf`]).
//! Whatever verifies only under an accepted secret is signed again under the current one
//! on the answer, so a buyer who visits during the overlap no longer needs the old secret
//! afterwards. The procedure (two rolling restarts, then one to end the overlap) is in
//! docs/configuration.md, "Rotating the secret": the accepted list is what lets servers
//! with the old and the new secret serve the same buyers meanwhile, as Rails' rotated
//! secrets and Django's `SECRET_KEY_FALLBACKS` do.

use crate::config::Settings;

/// The secrets of a deployment that set `--secret`: the one that signs, then those that
/// are only accepted. Every one is at least [`MIN_SECRET_BYTES`] long.
#[derive(Clone, Debug)]
pub struct Secrets {
    current: String,
    accepted: Vec<String>,
}

/// The shortest secret accepted: 32 bytes, HMAC-SHA256's output length.
pub const MIN_SECRET_BYTES: usize = 32;

impl Secrets {
    /// `--secret` and `--accepted-secrets` of `settings`: `Ok(None)` when no secret is set
    /// (each process then draws its own, which suits one process only). Errors, in words:
    /// a secret shorter than [`MIN_SECRET_BYTES`], or accepted secrets without `--secret`.
    pub fn of(settings: &Settings) -> Result<Option<Secrets>, String> {
        let accepted: Vec<String> = settings
            .accepted_secrets
            .iter()
            .flat_map(|list| list.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let Some(current) = settings.secret.clone() else {
            if accepted.is_empty() {
                return Ok(None);
            }
            return Err(
                "SEATLOCK_ACCEPTED_SECRETS needs SEATLOCK_SECRET, the secret that signs".into(),
            );
        };
        if current.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "SEATLOCK_SECRET must be at least {MIN_SECRET_BYTES} bytes"
            ));
        }
        if let Some(i) = accepted.iter().position(|s| s.len() < MIN_SECRET_BYTES) {
            return Err(format!(
                "SEATLOCK_ACCEPTED_SECRETS: secret {} of the list must be at least \
                 {MIN_SECRET_BYTES} bytes",
                i + 1
            ));
        }
        Ok(Some(Secrets { current, accepted }))
    }

    /// Every secret that verifies, the current one (the one that signs) first.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.current.as_str()).chain(self.accepted.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(secret: Option<&str>, accepted: Option<&str>) -> Settings {
        let mut settings = Settings::new("postgres://x", "redis://x", "127.0.0.1:0");
        settings.secret = secret.map(str::to_owned);
        settings.accepted_secrets = accepted.map(str::to_owned);
        settings
    }

    #[test]
    fn the_current_secret_comes_first_and_short_or_orphan_secrets_are_refused() {
        let (a, b, c) = ("a".repeat(32), "b".repeat(40), "c".repeat(32));
        let list = format!("{b}, {c},");
        let secrets = Secrets::of(&settings(Some(&a), Some(&list)))
            .unwrap()
            .unwrap();
        assert_eq!(secrets.all().collect::<Vec<_>>(), [&a, &b, &c]);
        assert!(Secrets::of(&settings(None, None)).unwrap().is_none());
        for (secret, accepted) in [
            (Some("short"), None),
            (Some(a.as_str()), Some("short")),
            (None, Some(b.as_str())),
        ] {
            let refused = Secrets::of(&settings(secret, accepted)).unwrap_err();
            assert!(refused.contains("SEATLOCK_"), "{refused}");
        }
    }
}
