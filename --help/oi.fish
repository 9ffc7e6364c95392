# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_oi_global_optspecs
    string join \n c/conf-file= f/foreground check q/quiet daemon threads= buffer-size= connect-timeout= half-close-timeout= drain= splice= status-file= status-interval= status-format= stats-log-interval= metrics= socket= user= group= watch v/version h/help
end

function __fish_oi_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_oi_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_oi_using_subcommand
    set -l cmd (__fish_oi_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c oi -n "__fish_oi_needs_command" -s c -l conf-file -d 'Configuration file to read (`oi status` and `oi connections` find the control socket in its `controlsocket` line)' -r -F
complete -c oi -n "__fish_oi_needs_command" -l threads -d 'Executor threads, 1 to 1024 (default: number of CPUs)' -r
complete -c oi -n "__fish_oi_needs_command" -l buffer-size -d 'Size of each copy buffer in bytes (1024 to 16777216; default: the configuration\'s `buffersize`, else 65536)' -r
complete -c oi -n "__fish_oi_needs_command" -l connect-timeout -d 'How long to wait for a backend to accept a connection (more than 0, at most 365 days; default 10s, or the configuration\'s `connect-timeout`). Given, it wins over every rule\'s' -r
complete -c oi -n "__fish_oi_needs_command" -l half-close-timeout -d 'How long a half-closed connection may stay idle before it is closed (more than 0, at most 365 days)' -r
complete -c oi -n "__fish_oi_needs_command" -l drain -d 'On SIGTERM/SIGINT, let open connections run this long before exiting (0 to 365 days; a second signal exits at once)' -r
complete -c oi -n "__fish_oi_needs_command" -l splice -d 'Zero-copy splice(2) forwarding: auto (splice; measured faster), on or off (default auto, or the rule\'s `splice=`). Given, it wins over every rule\'s' -r -f -a "auto\t''
on\t''
off\t''"
complete -c oi -n "__fish_oi_needs_command" -l status-file -d 'Write a status file (rinetd-uv\'s `statusfile`), replaced whole every --status-interval' -r -F
complete -c oi -n "__fish_oi_needs_command" -l status-interval -d 'How often to rewrite the status file (more than 0, at most 365 days; default 30s, or the configuration\'s `statusinterval`)' -r
complete -c oi -n "__fish_oi_needs_command" -l status-format -d 'The status file\'s format: json or text' -r -f -a "json\t''
text\t''"
complete -c oi -n "__fish_oi_needs_command" -l stats-log-interval -d 'How often to log a one-line STATS summary (0 turns it off; default 60s, or the configuration\'s `statsloginterval`)' -r
complete -c oi -n "__fish_oi_needs_command" -l metrics -d 'Serve Prometheus metrics at http://ADDR/metrics (for example 127.0.0.1:9465)' -r
complete -c oi -n "__fish_oi_needs_command" -l socket -d 'The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it' -r -F
complete -c oi -n "__fish_oi_needs_command" -l user -d 'After binding, run as this user (name or uid), keeping only CAP_NET_BIND_SERVICE so a reload can still bind ports below 1024 (or the configuration\'s `user`)' -r
complete -c oi -n "__fish_oi_needs_command" -l group -d 'With --user: the group to run as (default: the user\'s primary group)' -r
complete -c oi -n "__fish_oi_needs_command" -s f -l foreground -d 'Stay in the foreground (the default for `oi`; under the name `rinetd` or with --daemon, it keeps the process from forking)'
complete -c oi -n "__fish_oi_needs_command" -l check -d 'Check the configuration, print what would run, and exit (0 if valid, 1 if not)'
complete -c oi -n "__fish_oi_needs_command" -s q -l quiet -d 'With --check: print nothing when the configuration is valid (errors and warnings still go to stderr)'
complete -c oi -n "__fish_oi_needs_command" -l daemon -d 'Fork to the background like rinetd, write a pid file and log to syslog'
complete -c oi -n "__fish_oi_needs_command" -l watch -d 'Reload by itself when the configuration file or an included file changes, as SIGHUP does (default: the configuration\'s `watch`, else off)'
complete -c oi -n "__fish_oi_needs_command" -s v -l version -d 'Print the version and exit'
complete -c oi -n "__fish_oi_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c oi -n "__fish_oi_needs_command" -f -a "status" -d 'Print the counters: connections, bytes, refusals, failures, per rule'
complete -c oi -n "__fish_oi_needs_command" -f -a "connections" -d 'Print one line per live TCP connection and UDP association'
complete -c oi -n "__fish_oi_needs_command" -f -a "top" -d 'Watch it live, like top: rules, backends and the busiest connections (q quit, s sort, f filter by rule, p pause). Not on a terminal: one table'
complete -c oi -n "__fish_oi_needs_command" -f -a "convert" -d 'Print the configuration (-c, with its includes) in the other format: rinetd.conf as YAML, YAML as rinetd.conf; what the other cannot say becomes a comment. Reads the file only: no running oi is needed'
complete -c oi -n "__fish_oi_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c oi -n "__fish_oi_using_subcommand status" -s c -l conf-file -d 'Configuration file to read (`oi status` and `oi connections` find the control socket in its `controlsocket` line)' -r -F
complete -c oi -n "__fish_oi_using_subcommand status" -l socket -d 'The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it' -r -F
complete -c oi -n "__fish_oi_using_subcommand status" -l json -d 'Print JSON (the status file\'s document) instead of text'
complete -c oi -n "__fish_oi_using_subcommand status" -s h -l help -d 'Print help'
complete -c oi -n "__fish_oi_using_subcommand connections" -s c -l conf-file -d 'Configuration file to read (`oi status` and `oi connections` find the control socket in its `controlsocket` line)' -r -F
complete -c oi -n "__fish_oi_using_subcommand connections" -l socket -d 'The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it' -r -F
complete -c oi -n "__fish_oi_using_subcommand connections" -l json -d 'Print a JSON array instead of text'
complete -c oi -n "__fish_oi_using_subcommand connections" -s h -l help -d 'Print help'
complete -c oi -n "__fish_oi_using_subcommand top" -l interval -d 'Time between polls of the control socket' -r
complete -c oi -n "__fish_oi_using_subcommand top" -s c -l conf-file -d 'Configuration file to read (`oi status` and `oi connections` find the control socket in its `controlsocket` line)' -r -F
complete -c oi -n "__fish_oi_using_subcommand top" -l socket -d 'The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it' -r -F
complete -c oi -n "__fish_oi_using_subcommand top" -s h -l help -d 'Print help'
complete -c oi -n "__fish_oi_using_subcommand convert" -l to -d 'The format to write (default: the one the file is not in)' -r -f -a "yaml\t''
conf\t''"
complete -c oi -n "__fish_oi_using_subcommand convert" -s c -l conf-file -d 'Configuration file to read (`oi status` and `oi connections` find the control socket in its `controlsocket` line)' -r -F
complete -c oi -n "__fish_oi_using_subcommand convert" -l socket -d 'The control socket: the server creates it (mode 0600); `oi status` and `oi connections` ask it' -r -F
complete -c oi -n "__fish_oi_using_subcommand convert" -s h -l help -d 'Print help'
complete -c oi -n "__fish_oi_using_subcommand help; and not __fish_seen_subcommand_from status connections top convert help" -f -a "status" -d 'Print the counters: connections, bytes, refusals, failures, per rule'
complete -c oi -n "__fish_oi_using_subcommand help; and not __fish_seen_subcommand_from status connections top convert help" -f -a "connections" -d 'Print one line per live TCP connection and UDP association'
complete -c oi -n "__fish_oi_using_subcommand help; and not __fish_seen_subcommand_from status connections top convert help" -f -a "top" -d 'Watch it live, like top: rules, backends and the busiest connections (q quit, s sort, f filter by rule, p pause). Not on a terminal: one table'
complete -c oi -n "__fish_oi_using_subcommand help; and not __fish_seen_subcommand_from status connections top convert help" -f -a "convert" -d 'Print the configuration (-c, with its includes) in the other format: rinetd.conf as YAML, YAML as rinetd.conf; what the other cannot say becomes a comment. Reads the file only: no running oi is needed'
complete -c oi -n "__fish_oi_using_subcommand help; and not __fish_seen_subcommand_from status connections top convert help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
