#!/bin/sh
# Makes the name rinetd run oi, without editing any file of Debian's rinetd
# package: /usr/sbin/rinetd and its man page are diverted (dpkg-divert keeps
# rinetd's own copies as rinetd.distrib, also across rinetd upgrades) and replaced
# by symbolic links to oi's. Debian's rinetd.service then starts oi, which,
# called rinetd, forks, writes /run/rinetd.pid and logs to syslog as rinetd does.
#
#   rinetd-takeover.sh install    divert, link, restart rinetd if it runs
#   rinetd-takeover.sh undo       put rinetd's files back, restart it if it runs
#   rinetd-takeover.sh status     show the diversions
set -eu

CONF=/etc/rinetd.conf
# diverted path, where rinetd's own file goes, what the path then points to
# (`man rinetd.distrib` still shows rinetd's page).
FILES="/usr/sbin/rinetd /usr/sbin/rinetd.distrib /usr/sbin/oi
/usr/share/man/man8/rinetd.8.gz /usr/share/man/man8/rinetd.distrib.8.gz /usr/share/man/man8/oi.8.gz"

restart_rinetd() {
    if [ -d /run/systemd/system ] && systemctl --quiet is-active rinetd.service; then
        echo "restarting rinetd.service (open connections are closed)"
        systemctl restart rinetd.service
    fi
}

case "${1:-}" in
install)
    [ -x /usr/sbin/oi ] || { echo "/usr/sbin/oi is missing" >&2; exit 1; }
    if [ -e "$CONF" ]; then
        /usr/sbin/oi --check -c "$CONF" >/dev/null
    fi
    echo "$FILES" | while read -r path moved target; do
        dpkg-divert --local --rename --divert "$moved" --add "$path"
        ln -sfn "$target" "$path"
    done
    restart_rinetd
    ;;
undo)
    echo "$FILES" | while read -r path moved target; do
        if [ -L "$path" ] && [ "$(readlink "$path")" = "$target" ]; then
            rm "$path"
        fi
        dpkg-divert --local --rename --divert "$moved" --remove "$path"
    done
    restart_rinetd
    ;;
status)
    echo "$FILES" | while read -r path moved target; do
        dpkg-divert --list "$path"
        ls -l "$path" 2>/dev/null || true
    done
    ;;
*)
    echo "usage: $0 install|undo|status" >&2
    exit 2
    ;;
esac
