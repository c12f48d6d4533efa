//! A container's seccomp profile (`linux.seccomp`, the kubelet's
//! `RuntimeDefault` or a `Localhost` profile, as containerd writes it in
//! config.json) as the guest's kernel applies it: the errno each system
//! call of the program is refused with, before the kernel runs it
//! (`shoal-tender --seccomp-deny`). The instance keeps its own host filter
//! either way (docs/architecture.md); this one is the program's, as
//! runc's is the container's.
//!
//! What is taken: the default action and each rule's action for the calls
//! it names. `SCMP_ACT_ALLOW` and `SCMP_ACT_LOG` let a call run;
//! `SCMP_ACT_ERRNO` refuses it with the rule's `errnoRet` (the default
//! action with `defaultErrnoRet`; `EPERM` without one); `SCMP_ACT_TRACE`
//! refuses it with `ENOSYS`, as Linux does with no tracer attached. A rule
//! with argument conditions is not evaluated per call: one that allows
//! allows the call with any arguments, one that refuses is not applied
//! (containerd's default profile narrows `clone`, `personality` and
//! `socket` so, guarding namespaces and address families the guest's
//! kernel refuses by itself). A profile that kills, traps or notifies is
//! refused with the reason: the guest's kernel does not end a program for
//! a call. Names this architecture lacks are skipped, as runc skips them.

use serde::Deserialize;

/// The highest system-call number + 1 a profile is applied to (x86-64's
/// table ends below it; the guest answers `ENOSYS` above).
pub const MAX_CALLS: usize = 512;

/// Why a profile cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    /// An action the guest's kernel does not take.
    #[error("linux.seccomp: action {0} is not supported (the guest's kernel refuses a call with an errno; it does not kill, trap or notify)")]
    Action(String),
    /// An errno the boot information cannot carry.
    #[error("linux.seccomp: errnoRet {0} is not an errno from 1 to 255")]
    Errno(u32),
}

/// `linux.seccomp`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// What a call no rule names gets.
    pub default_action: String,
    /// The errno of an `SCMP_ACT_ERRNO` default action.
    pub default_errno_ret: Option<u32>,
    /// The rules.
    #[serde(default)]
    pub syscalls: Vec<Rule>,
}

/// One of `linux.seccomp.syscalls`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// The calls it names.
    #[serde(default)]
    pub names: Vec<String>,
    /// Its action.
    pub action: String,
    /// The errno of an `SCMP_ACT_ERRNO` action.
    pub errno_ret: Option<u32>,
    /// Argument conditions (only whether there are any is read).
    #[serde(default)]
    pub args: Vec<serde_json::Value>,
}

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The errno `action` refuses a call with (0: the call runs).
fn errno_of(action: &str, errno_ret: Option<u32>) -> Result<u8, SeccompError> {
    let e = match action {
        "SCMP_ACT_ALLOW" | "SCMP_ACT_LOG" => 0,
        "SCMP_ACT_ERRNO" => errno_ret.unwrap_or(EPERM),
        "SCMP_ACT_TRACE" => ENOSYS,
        other => return Err(SeccompError::Action(other.into())),
    };
    if action == "SCMP_ACT_ERRNO" && !(1..=255).contains(&e) {
        return Err(SeccompError::Errno(e));
    }
    Ok(e as u8)
}

impl Profile {
    /// The errno of each call number below [`MAX_CALLS`] (0: allowed).
    pub fn errnos(&self) -> Result<Vec<u8>, SeccompError> {
        let mut out = vec![errno_of(&self.default_action, self.default_errno_ret)?; MAX_CALLS];
        let numbers = |r: &Rule| r.names.iter().filter_map(|n| crate::syscalls::number(n)).map(usize::from).filter(|&n| n < MAX_CALLS).collect::<Vec<_>>();
        for r in self.syscalls.iter().filter(|r| r.args.is_empty()) {
            let e = errno_of(&r.action, r.errno_ret)?;
            for n in numbers(r) {
                out[n] = e;
            }
        }
        for r in self.syscalls.iter().filter(|r| !r.args.is_empty()) {
            if errno_of(&r.action, r.errno_ret)? == 0 {
                for n in numbers(r) {
                    out[n] = 0;
                }
            }
        }
        Ok(out)
    }

    /// The `--seccomp-deny` value: `NR=ERRNO` for each refused call,
    /// separated by commas (empty: nothing refused).
    pub fn tender_arg(&self) -> Result<String, SeccompError> {
        let e = self.errnos()?;
        Ok(e.iter().enumerate().filter(|(_, &e)| e != 0).map(|(n, e)| format!("{n}={e}")).collect::<Vec<_>>().join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(j: serde_json::Value) -> Profile {
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn a_deny_list_refuses_what_it_names() {
        // critest's profile that blocks sethostname.
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["sethostname", "no_such_call"], "action": "SCMP_ACT_ERRNO"}]}));
        assert_eq!(p.tender_arg().unwrap(), "170=1");
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13}]}));
        assert_eq!(p.tender_arg().unwrap(), "90=13,268=13");
    }

    #[test]
    fn an_allow_list_refuses_the_rest() {
        // containerd's default profile's shape: ERRNO by default, allowed
        // names, clone allowed under conditions, clone3 ENOSYS, a
        // conditional refusal of some sockets that is not applied.
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1,
        "syscalls": [
            {"names": ["read", "write", "socket"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060288, "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
            {"names": ["socket"], "action": "SCMP_ACT_ERRNO", "errnoRet": 22, "args": [{"index": 0, "value": 40, "op": "SCMP_CMP_EQ"}]}
        ]}));
        let e = p.errnos().unwrap();
        assert_eq!((e[0], e[1], e[41], e[56], e[435], e[170], e[511]), (0, 0, 0, 0, 38, 1, 1));
    }

    #[test]
    fn kills_and_bad_errnos_are_refused() {
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_KILL_PROCESS"}));
        assert_eq!(
            p.errnos().unwrap_err().to_string(),
            "linux.seccomp: action SCMP_ACT_KILL_PROCESS is not supported (the guest's kernel refuses a call with an errno; it does not kill, trap or notify)"
        );
        let p =
            profile(serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 4096}]}));
        assert_eq!(p.errnos().unwrap_err().to_string(), "linux.seccomp: errnoRet 4096 is not an errno from 1 to 255");
        let p = profile(serde_json::json!({"defaultAction": "SCMP_ACT_TRACE"}));
        assert_eq!(p.errnos().unwrap()[0], 38);
    }
}
