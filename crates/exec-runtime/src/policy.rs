//! Permission modes and the gates each one opens.

/// The operator's command policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// The default: network, shell expansion, inline scripts, destructive and
    /// outside-workspace commands are refused.
    Safe,
    /// Local development: network, shell expansion and inline scripts allowed.
    Trusted,
    /// Every gate open, no Landlock, no environment filter.
    Dangerous,
}

/// Whether one gate lets a command through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    /// Refused with `PERMISSION_REQUIRED`.
    Blocked,
    /// Let through.
    Allowed,
}

impl GateState {
    fn from_allowed(allowed: bool) -> Self {
        if allowed {
            Self::Allowed
        } else {
            Self::Blocked
        }
    }

    /// Stable name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Blocked => "blocked",
            Self::Allowed => "allowed",
        }
    }
}

/// The gates of one mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gates {
    /// Network-looking commands.
    pub network: GateState,
    /// `` ` ``, `$(`, `${`.
    pub shell_expansion: GateState,
    /// `sh -c`, `python -c`, `node -e`, ...
    pub inline_script: GateState,
    /// `rm -rf`, `git reset --hard`, `sudo`, ...
    pub destructive_command: GateState,
    /// Path arguments outside the workspace and runtime dir.
    pub filesystem_escape: GateState,
    /// setuid/setgid executables.
    pub privileged_executable: GateState,
    /// Secret and loader variables are removed from the environment.
    pub secret_env_filter: bool,
    /// Commands are confined with Landlock where the kernel offers it.
    pub landlock: bool,
}

impl Gates {
    /// The gates of `mode`; `allow_network` opens only the network gate.
    pub fn for_mode(mode: PermissionMode, allow_network: bool) -> Self {
        let dev = mode != PermissionMode::Safe;
        let all = mode == PermissionMode::Dangerous;
        Self {
            network: GateState::from_allowed(dev || allow_network),
            shell_expansion: GateState::from_allowed(dev),
            inline_script: GateState::from_allowed(dev),
            destructive_command: GateState::from_allowed(all),
            filesystem_escape: GateState::from_allowed(all),
            privileged_executable: GateState::from_allowed(all),
            secret_env_filter: !all,
            landlock: !all,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_table() {
        let safe = Gates::for_mode(PermissionMode::Safe, false);
        assert_eq!(safe.network, GateState::Blocked);
        assert_eq!(safe.inline_script, GateState::Blocked);
        assert!(safe.secret_env_filter && safe.landlock);
        let net = Gates::for_mode(PermissionMode::Safe, true);
        assert_eq!(net.network, GateState::Allowed);
        assert_eq!(net.shell_expansion, GateState::Blocked);
        let trusted = Gates::for_mode(PermissionMode::Trusted, false);
        assert_eq!(trusted.shell_expansion, GateState::Allowed);
        assert_eq!(trusted.destructive_command, GateState::Blocked);
        let d = Gates::for_mode(PermissionMode::Dangerous, false);
        assert_eq!(d.destructive_command, GateState::Allowed);
        assert!(!d.secret_env_filter && !d.landlock);
    }
}
