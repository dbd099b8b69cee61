//! The lab's own flags: the unsafe purchase strategies, the switch that allows them and
//! the failover guard's off switch. They are flags of `seatlock-lab serve` only. The
//! product's `seatlock serve` does not know them.

use clap::Args;
use serde::Serialize;

/// The race lab's settings, beside the product's [`seatlock::config::Settings`].
/// [`LabSettings::default`] is the lab switched off: the product's behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Args, Serialize)]
pub struct LabSettings {
    /// How purchases are made. Only `fenced` is the product; the `race-lab-*` strategies
    /// are unsafe on purpose (they can sell a seat twice), for `load-test race`, and need
    /// `--enable-race-lab`: without it the command line is refused.
    #[arg(
        long,
        env = "SEATLOCK_PURCHASE_STRATEGY",
        value_enum,
        default_value = "fenced",
        requires_ifs = [
            ("race-lab-naive", "enable_race_lab"),
            ("race-lab-unfenced-lease", "enable_race_lab"),
            ("race-lab-conditional", "enable_race_lab"),
            ("race-lab-lock-delay", "enable_race_lab"),
        ]
    )]
    pub purchase_strategy: PurchaseStrategy,
    /// Allows the race-lab strategies, the pause headers and the lab's pages. Never in
    /// production.
    #[arg(long, env = "SEATLOCK_ENABLE_RACE_LAB")]
    pub enable_race_lab: bool,
    /// Lab only (`make failover`), never in production; needs `--enable-race-lab` (the
    /// command line is refused without it). Turns off the failover guard of the lease
    /// store ([`lease::LeaseClient::with_failover_guard`]). After a Redis failover to a
    /// replica that missed the last grants, a fencing token is then issued twice, which
    /// the failover lab shows.
    #[arg(
        long,
        env = "SEATLOCK_LAB_DISABLE_FAILOVER_GUARD",
        requires_if("true", "enable_race_lab")
    )]
    pub lab_disable_failover_guard: bool,
    /// Lab only, never in production; needs `--enable-race-lab`. Turns cooling off
    /// ([`lease::LeaseClient::with_cooling`]): a hold that lapses while its confirm is in
    /// flight is granted to the next buyer at once, and only the fence refuses the late
    /// write (`make race`'s `fenced` row, docs/time-to-pay.md).
    #[arg(
        long,
        env = "SEATLOCK_LAB_DISABLE_COOLING",
        requires_if("true", "enable_race_lab")
    )]
    pub lab_disable_cooling: bool,
    /// The lock-delay of `--purchase-strategy race-lab-lock-delay`, in milliseconds:
    /// after a holder's lease lapses, nobody is granted the seat for this long (Chubby's
    /// lock-delay). A pause that outlasts the lease by more than this still sells twice.
    #[arg(long, env = "SEATLOCK_LAB_LOCK_DELAY_MS", default_value_t = DEFAULT_LOCK_DELAY_MS)]
    pub lab_lock_delay_ms: u64,
    /// The Redis server binary the lab starts servers of its own from, for the faults
    /// that happen to the lock server itself (a restart, a failover): a name on `PATH`
    /// or a path.
    #[arg(
        long,
        env = "SEATLOCK_LAB_REDIS_SERVER",
        default_value = "redis-server"
    )]
    pub lab_redis_server: String,
    /// A Redis-protocol server binary that runs under libfaketime, for the fault "the
    /// lock server's clock jumps forward"; without it the lab's form lists that fault
    /// disabled, and a run of it is refused.
    /// Debian's `redis-server` cannot (it is linked against jemalloc, which libfaketime
    /// cannot start under); `scripts/services.sh clock-server` fetches Valkey's, and
    /// `make lab` and `make test` pass it.
    #[arg(long, env = "SEATLOCK_LAB_CLOCK_SERVER")]
    pub lab_clock_server: Option<String>,
}

/// `--lab-lock-delay-ms`'s default: shorter than `load-test race`'s default pause
/// outlasts its default lease (600 ms against 300 ms), so its race sells twice.
pub const DEFAULT_LOCK_DELAY_MS: u64 = 150;

impl Default for LabSettings {
    /// The lab switched off: the product's behaviour, the flags' defaults.
    fn default() -> Self {
        LabSettings {
            purchase_strategy: PurchaseStrategy::Fenced,
            enable_race_lab: false,
            lab_disable_failover_guard: false,
            lab_disable_cooling: false,
            lab_lock_delay_ms: DEFAULT_LOCK_DELAY_MS,
            lab_redis_server: "redis-server".to_owned(),
            lab_clock_server: None,
        }
    }
}

impl LabSettings {
    /// The lab switched on, with the product's strategy (`fenced`).
    pub fn enabled() -> Self {
        LabSettings {
            enable_race_lab: true,
            ..LabSettings::default()
        }
    }

    /// `--lab-lock-delay-ms` as a `Duration`.
    pub fn lock_delay(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.lab_lock_delay_ms)
    }

    /// The lab's flags as a clap command (for `--help` text and the flags' metadata).
    pub fn command() -> clap::Command {
        Self::augment_args(clap::Command::new("serve"))
    }

    /// The checks after parsing, both: [`LabSettings::refuse_lab_settings_without_the_lab`]
    /// and [`LabSettings::refuse_missing_servers`]. Errors: clap's, naming the flag.
    pub fn check(&self) -> Result<(), clap::Error> {
        self.refuse_lab_settings_without_the_lab()?;
        self.refuse_missing_servers()
    }

    /// With the lab on, refuses a `--lab-clock-server` or a `--lab-redis-server` that
    /// names no executable file (a path, or a name on `PATH`): the lab would offer the
    /// clock jump or the replays, and every one would fail (found by a hostile test).
    /// Errors: clap's "invalid value" error naming the flag and where to get one.
    pub fn refuse_missing_servers(&self) -> Result<(), clap::Error> {
        if !self.enable_race_lab {
            return Ok(());
        }
        let servers = [
            (
                "--lab-clock-server (SEATLOCK_LAB_CLOCK_SERVER)",
                self.lab_clock_server.as_deref(),
                "`scripts/services.sh clock-server` fetches one and prints its path",
            ),
            (
                "--lab-redis-server (SEATLOCK_LAB_REDIS_SERVER)",
                Some(self.lab_redis_server.as_str()),
                "`apt-get install redis-server` installs one",
            ),
        ];
        for (flag, binary, remedy) in servers {
            let Some(binary) = binary else { continue };
            if !executable_file(binary) {
                return Err(Self::command().error(
                    clap::error::ErrorKind::InvalidValue,
                    format!("{flag} names no executable file: {binary:?}. {remedy}."),
                ));
            }
        }
        Ok(())
    }

    /// Refuses the lab-only settings without `--enable-race-lab`, after parsing. Clap's
    /// `requires` (above) refuses them on the command line. But it counts a flag set in
    /// the environment as given even when its value is `false`
    /// (`SEATLOCK_ENABLE_RACE_LAB=false`), which would let an unsafe strategy start.
    /// Errors: clap's "required arguments were not provided" error naming the flag.
    pub fn refuse_lab_settings_without_the_lab(&self) -> Result<(), clap::Error> {
        let lab_only = self.purchase_strategy != PurchaseStrategy::Fenced
            || self.lab_disable_failover_guard
            || self.lab_disable_cooling;
        if lab_only && !self.enable_race_lab {
            return Err(Self::command().error(
                clap::error::ErrorKind::MissingRequiredArgument,
                "the race-lab strategies, --lab-disable-failover-guard and --lab-disable-cooling need --enable-race-lab \
                 (SEATLOCK_ENABLE_RACE_LAB=true)",
            ));
        }
        Ok(())
    }

    /// The environment variables that start a `seatlock-lab serve` process with these
    /// settings: one `(NAME, value)` per flag. Names come from the flags' `env`
    /// attributes, values from the fields, as [`seatlock::config::Settings::to_env`].
    pub fn to_env(&self) -> Vec<(String, String)> {
        let values = serde_json::to_value(self).expect("lab settings serialise to JSON");
        Self::command()
            .get_arguments()
            .filter_map(|arg| {
                let name = arg.get_env()?.to_str()?.to_owned();
                let value = match &values[arg.get_id().as_str()] {
                    // A flag left unset is a variable left unset.
                    serde_json::Value::Null => return None,
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                Some((name, value))
            })
            .collect()
    }
}

/// Whether `binary` names an executable file: a path, or a name found on `PATH`.
fn executable_file(binary: &str) -> bool {
    let executable = |path: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        path.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if binary.contains('/') {
        return executable(std::path::Path::new(binary));
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| executable(&dir.join(binary))))
}

/// How a server makes a purchase (`--purchase-strategy`). Only `Fenced` is the product;
/// the others exist for the race lab and need `--enable-race-lab`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, serde::Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum PurchaseStrategy {
    /// Lease + fencing token checked by Postgres: the product path.
    #[default]
    Fenced,
    /// No lock at all: read the seat, payment delay, write "sold".
    RaceLabNaive,
    /// A Redis lease with owner-checked release, but the write carries no fencing token.
    RaceLabUnfencedLease,
    /// No lock service: one `UPDATE … WHERE sold = false`.
    RaceLabConditional,
    /// Chubby's answer for a resource that cannot check a sequencer: a Redis lease whose
    /// lapse is followed by a lock-delay (`--lab-lock-delay-ms`) before anyone else is
    /// granted the seat, and a write that carries no fencing token.
    RaceLabLockDelay,
}

impl PurchaseStrategy {
    /// The short name used by `load-test --strategy` and in reports.
    pub fn short_name(self) -> &'static str {
        match self {
            PurchaseStrategy::Fenced => "fenced",
            PurchaseStrategy::RaceLabNaive => "naive",
            PurchaseStrategy::RaceLabUnfencedLease => "lease",
            PurchaseStrategy::RaceLabConditional => "conditional",
            PurchaseStrategy::RaceLabLockDelay => "lock-delay",
        }
    }

    /// The value of `seatlock-lab serve --purchase-strategy` (`race-lab-naive`, …).
    pub fn flag_value(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .expect("no strategy is skipped")
            .get_name()
            .to_owned()
    }

    /// Whether holds take a Redis lease under this strategy.
    pub fn uses_lease(self) -> bool {
        matches!(
            self,
            PurchaseStrategy::Fenced
                | PurchaseStrategy::RaceLabUnfencedLease
                | PurchaseStrategy::RaceLabLockDelay
        )
    }

    /// All five, in report order.
    pub const ALL: [PurchaseStrategy; 5] = [
        PurchaseStrategy::RaceLabNaive,
        PurchaseStrategy::RaceLabUnfencedLease,
        PurchaseStrategy::RaceLabLockDelay,
        PurchaseStrategy::Fenced,
        PurchaseStrategy::RaceLabConditional,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches as _;

    /// Parses `argv` (after `serve`) as `seatlock-lab serve` would, environment unread.
    fn serve(extra: &[&str]) -> Result<LabSettings, clap::Error> {
        let args = std::iter::once("serve").chain(extra.iter().copied());
        let matches = LabSettings::command()
            .mut_args(|arg| arg.env(None))
            .try_get_matches_from(args)?;
        LabSettings::from_arg_matches(&matches)
    }

    #[test]
    fn lab_flags_are_refused_without_the_race_lab() {
        for lab_only in [
            &["--purchase-strategy", "race-lab-naive"][..],
            &["--purchase-strategy", "race-lab-unfenced-lease"],
            &["--purchase-strategy", "race-lab-conditional"],
            &["--purchase-strategy", "race-lab-lock-delay"],
            &["--lab-disable-failover-guard"],
            &["--lab-disable-cooling"],
        ] {
            let err = serve(lab_only).expect_err("a lab flag alone");
            assert!(err.to_string().contains("--enable-race-lab"), "{err}");
            let mut with_lab = lab_only.to_vec();
            with_lab.push("--enable-race-lab");
            assert!(serve(&with_lab).is_ok(), "{with_lab:?}");
        }
        assert!(serve(&["--purchase-strategy", "fenced"]).is_ok());
        // SEATLOCK_ENABLE_RACE_LAB=false passes clap's `requires`; the check after parsing
        // refuses it.
        let mut settings = LabSettings {
            purchase_strategy: PurchaseStrategy::RaceLabNaive,
            ..LabSettings::default()
        };
        let err = settings.refuse_lab_settings_without_the_lab().unwrap_err();
        assert!(err.to_string().contains("--enable-race-lab"), "{err}");
        settings.enable_race_lab = true;
        assert!(settings.refuse_lab_settings_without_the_lab().is_ok());
    }

    #[test]
    fn a_server_binary_that_is_not_an_executable_file_is_refused_at_the_start() {
        let with = |binary: &str| LabSettings {
            lab_clock_server: Some(binary.to_owned()),
            ..LabSettings::enabled()
        };
        // A file that is there but cannot be run.
        let plain = std::env::temp_dir().join(format!("not-a-server-{}", std::process::id()));
        std::fs::write(&plain, "").unwrap();
        let plain_path = plain.display().to_string();
        for missing in ["/nope/valkey-server", "no-such-server-on-path", &plain_path] {
            let err = with(missing).check().expect_err(missing);
            assert!(err.to_string().contains("--lab-clock-server"), "{err}");
            assert!(err.to_string().contains(missing), "{err}");
        }
        std::fs::remove_file(plain).unwrap();
        assert!(with("/bin/sh").check().is_ok());
        assert!(with("sh").check().is_ok());
        let redis = LabSettings {
            lab_redis_server: "/nope/redis-server".into(),
            ..LabSettings::enabled()
        };
        let err = redis.check().unwrap_err().to_string();
        assert!(err.contains("--lab-redis-server"), "{err}");
        // The lab off: no page of its starts a server, so nothing is checked.
        let off = LabSettings {
            enable_race_lab: false,
            ..with("/nope")
        };
        assert!(off.check().is_ok());
    }

    #[test]
    fn the_default_is_the_flags_default_and_the_lab_off() {
        assert_eq!(serve(&[]).unwrap(), LabSettings::default());
        assert_eq!(
            LabSettings::default().purchase_strategy,
            PurchaseStrategy::Fenced
        );
        assert!(!LabSettings::default().enable_race_lab);
    }

    #[test]
    fn every_lab_setting_survives_the_trip_through_the_environment() {
        let settings = LabSettings {
            purchase_strategy: PurchaseStrategy::RaceLabUnfencedLease,
            enable_race_lab: true,
            lab_disable_failover_guard: true,
            lab_disable_cooling: true,
            lab_lock_delay_ms: 1_234,
            lab_redis_server: "/opt/redis/bin/redis-server".to_owned(),
            lab_clock_server: Some(".run/bin/valkey-server".to_owned()),
        };
        let env = settings.to_env();
        assert_eq!(env.len(), LabSettings::command().get_arguments().count());
        let mut argv = Vec::new();
        for (name, value) in &env {
            let arg = LabSettings::command()
                .get_arguments()
                .find(|a| a.get_env().and_then(|e| e.to_str()) == Some(name.as_str()))
                .cloned()
                .unwrap_or_else(|| panic!("{name} is no flag's variable"));
            let flag = format!("--{}", arg.get_long().expect("a long flag"));
            if arg.get_action().takes_values() {
                argv.extend([flag, value.clone()]);
            } else if value == "true" {
                argv.push(flag);
            }
        }
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        assert_eq!(serve(&argv).unwrap(), settings);
    }

    /// docs/configuration.md's `seatlock-lab serve` table lists the lab's flags, and only
    /// those (the product's table is checked against `seatlock serve --help`).
    #[test]
    fn the_configuration_table_lists_every_lab_flag_and_no_other() {
        let page = include_str!("../../docs/configuration.md");
        let table = page
            .split("\n## ")
            .find(|s| s.starts_with("`seatlock-lab serve`"))
            .expect("a `## `seatlock-lab serve`` table in docs/configuration.md");
        let listed: std::collections::BTreeSet<String> = table
            .lines()
            .filter_map(|line| line.strip_prefix('|')?.split('|').next())
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .filter(|code| code.starts_with("--"))
            .map(str::to_owned)
            .collect();
        let flags: std::collections::BTreeSet<String> = LabSettings::command()
            .get_arguments()
            .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
            .collect();
        assert_eq!(listed, flags);
    }

    #[test]
    fn strategy_flag_values_are_clap_names() {
        assert_eq!(
            PurchaseStrategy::RaceLabNaive.flag_value(),
            "race-lab-naive"
        );
        assert_eq!(PurchaseStrategy::Fenced.flag_value(), "fenced");
    }
}
