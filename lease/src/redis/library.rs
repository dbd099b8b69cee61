//! The scripts that need the server's identity, run as one Redis function library
//! (Redis 7: `FUNCTION LOAD`, `FCALL`) instead of `EVALSHA`.
//!
//! Why a library: a grant with the failover guard on must know which Redis server runs
//! it (`server_identity.lua`). Part of that identity, the `run_id`, is fixed for the
//! life of the process, but a script cannot remember anything between two `EVALSHA`s:
//! each one read it again with `INFO server`, the costliest call of a grant. A library's
//! Lua state lives as long as the process that loaded it, so the library reads it once.
//! A restart loads the library afresh (from the RDB, the AOF, a replica's sync, or the
//! first `FCALL` that finds it missing), and reads the new `run_id`.
//!
//! The library's name and its functions' names carry a hash of its code, so two
//! versions of this crate on one Redis (a rolling upgrade) each call their own. A
//! library is loaded the way `EVALSHA` loads a script: an `FCALL` that finds no such
//! function loads the library (on a cluster, on every master) and calls again.

use redis::{Cmd, RedisError, Script, ToRedisArgs};

/// One function library: its code (with the `#!lua name=` line) and its name's suffix.
pub(crate) struct Library {
    code: String,
    suffix: String,
}

impl Library {
    /// A library of `functions` (name, Lua body that reads `KEYS` and `ARGV` and
    /// returns its reply), each body preceded by `prelude` (shared local functions and
    /// the state they keep). Its name is `seatlock_lease_<hash>`, and function `f` is
    /// called as `seatlock_<f>_<hash>` ([`Library::call`]).
    pub(crate) fn new(prelude: &str, functions: &[(&str, &str)]) -> Library {
        let mut body = String::from(prelude);
        for (name, code) in functions {
            // The marker is replaced below, once the hash of the whole body is known.
            body.push_str(&format!(
                "redis.register_function('seatlock_{name}_@', function(KEYS, ARGV)\n{code}\nend)\n"
            ));
        }
        // SHA-1 of the body, as `EVALSHA` names a script; 12 hex digits tell versions
        // apart.
        let suffix = Script::new(&body).get_hash()[..12].to_owned();
        let body = body.replace("_@'", &format!("_{suffix}'"));
        Library {
            code: format!("#!lua name=seatlock_lease_{suffix}\n{body}"),
            suffix,
        }
    }

    /// An `FCALL` of the library's function `function`, its keys and arguments to be
    /// added.
    pub(crate) fn call(&self, function: &str) -> FunctionCall {
        FunctionCall {
            name: format!("seatlock_{function}_{}", self.suffix),
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// `FUNCTION LOAD REPLACE <code>`: on a cluster, redis-rs sends it to every master.
    pub(crate) fn load(&self) -> Cmd {
        let mut load = redis::cmd("FUNCTION");
        load.arg("LOAD").arg("REPLACE").arg(&self.code);
        load
    }

    /// Whether `err` says the server has no such function: it has not loaded this
    /// library since it started (or its data was flushed), so load it and call again.
    pub(crate) fn is_missing(err: &RedisError) -> bool {
        err.code() == Some("ERR") && err.detail() == Some("Function not found")
    }
}

/// An `FCALL` being put together: the function's name, its keys, then its arguments.
pub(crate) struct FunctionCall {
    name: String,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl FunctionCall {
    /// Adds a key (`KEYS[n]`, in order).
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument (`ARGV[n]`, in order).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// `FCALL <name> <number of keys> <keys…> <args…>`.
    pub(crate) fn command(&self) -> Cmd {
        let mut fcall = redis::cmd("FCALL");
        fcall
            .arg(&self.name)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        fcall
    }
}

#[cfg(test)]
mod tests {
    use crate::redis::library::Library;

    #[test]
    fn names_carry_the_hash_of_the_code() {
        let one = Library::new("", &[("acquire", "return 1")]);
        let two = Library::new("", &[("acquire", "return 2")]);
        assert_ne!(one.suffix, two.suffix);
        assert!(
            one.code
                .starts_with(&format!("#!lua name=seatlock_lease_{}\n", one.suffix))
        );
        assert!(
            one.code
                .contains(&format!("'seatlock_acquire_{}'", one.suffix))
        );
        assert_eq!(
            one.call("acquire").name,
            format!("seatlock_acquire_{}", one.suffix)
        );
    }
}
