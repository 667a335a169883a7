#!/usr/bin/python3
"""A BitTorrent client for shoal's end-to-end tests, on libtorrent (python3-libtorrent,
Debian). Run it with Debian's /usr/bin/python3: that is the interpreter the Debian
package installs the module for.

    lt_client.py make-torrent FILE TRACKER_URL OUT.torrent     prints the info hash (hex)
    lt_client.py seed  TORRENT DIR --ip IP --status STATUS [--upload-limit BYTES_PER_S]
    lt_client.py leech TORRENT DIR --ip IP --status STATUS

seed and leech run one libtorrent session each (so two processes meet over the
network, not inside one session), listening on IP with a port the kernel picks, and
append lines to STATUS as they get somewhere: "listening PORT", "announced" (the first
tracker reply), "seeding" (all pieces verified on disk), "finished" (download
complete). They run until SIGTERM or SIGINT, then leave the swarm the way a user
quitting would: pausing the torrent announces event=stopped, and the process exits
once the tracker has replied to that.

The tracker must be the only way the two peers meet, so DHT, local service discovery,
UPnP, NAT-PMP and peer exchange are all off (in the settings the session is created
with, so none of them starts even briefly).
"""

import argparse
import os
import signal
import sys
import time

import libtorrent as lt


def log(*args):
    print(time.strftime("%H:%M:%S"), *args, flush=True)


def make_torrent(args):
    fs = lt.file_storage()
    lt.add_files(fs, args.file)
    # v1 only: keeps the info hash a plain SHA-1 of the info dictionary, as every
    # tracker protocol here expects, and the .torrent readable by any client.
    ct = lt.create_torrent(fs, 0, lt.create_torrent.v1_only)
    # The one and only tracker; no DHT nodes, no web seeds.
    ct.add_tracker(args.tracker_url, 0)
    ct.set_creator("shoal e2e")
    lt.set_piece_hashes(ct, os.path.dirname(os.path.abspath(args.file)))
    data = lt.bencode(ct.generate())
    with open(args.out, "wb") as f:
        f.write(data)
    info = lt.torrent_info(args.out)
    trackers = [t.url for t in info.trackers()]
    if trackers != [args.tracker_url]:
        sys.exit(f"the torrent names trackers {trackers}, expected only {args.tracker_url}")
    print(str(info.info_hashes().v1))


def session_settings(args):
    # The address as libtorrent wants it in listen_interfaces: IPv6 in brackets.
    ip = f"[{args.ip}]" if ":" in args.ip else args.ip
    settings = {
        "listen_interfaces": f"{ip}:0",
        # Peers meet through the tracker only.
        "enable_dht": False,
        "enable_lsd": False,
        "enable_upnp": False,
        "enable_natpmp": False,
        # Seeder and leecher share 127.0.0.1 (or ::1); by default libtorrent keeps one
        # connection per IP address.
        "allow_multiple_connections_per_ip": True,
        # TCP between the peers, not uTP: a rate-limited uTP transfer on loopback
        # once stalled for 40 s after a block timeout (a full test run, 2026-11-23),
        # and what these tests check is the tracker, not the peer wire.
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "alert_mask": lt.alert.category_t.error_notification
        | lt.alert.category_t.status_notification
        | lt.alert.category_t.tracker_notification
        | lt.alert.category_t.connect_notification
        | lt.alert.category_t.peer_notification,
    }
    if args.upload_limit:
        # A seeder that uploads slowly keeps the leecher a leecher for a few seconds,
        # long enough for the test to scrape it as one. Local peers are exempt from
        # rate limits unless told otherwise.
        settings["upload_rate_limit"] = args.upload_limit
        settings["ignore_limits_on_local_network"] = False
    # HTTPS trackers: libtorrent verifies the tracker's certificate (the default,
    # validate_https_trackers = true) against OpenSSL's default CA store; the test
    # points that store at its own self-signed certificate with SSL_CERT_FILE.
    return settings


def run_client(args, seeding):
    status = open(args.status, "a", buffering=1)

    def say(line):
        log(line)
        status.write(line + "\n")

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))

    # Flags 0: none of the default plugins, so no ut_pex (peer exchange) either.
    ses = lt.session(session_settings(args), 0)

    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(args.torrent)
    params.save_path = args.dir
    # No peer exchange, DHT or LSD for this torrent either (belt and braces).
    params.flags |= lt.torrent_flags.disable_pex | lt.torrent_flags.disable_dht | lt.torrent_flags.disable_lsd
    params.flags &= ~lt.torrent_flags.auto_managed
    params.flags &= ~lt.torrent_flags.paused
    handle = ses.add_torrent(params)
    log("added", "seed" if seeding else "leech", args.torrent, "in", args.dir)

    listening = announced = seeded = finished = False
    last_progress = 0.0
    while not stopping:
        ses.wait_for_alert(200)
        for a in ses.pop_alerts():
            kind = type(a).__name__
            if kind == "listen_succeeded_alert":
                log(a.message())  # once for TCP, once for uTP
                if not listening:
                    listening = True
                    say(f"listening {a.port}")
            elif kind == "tracker_reply_alert":
                log("tracker reply:", a.message())
                if not announced:
                    announced = True
                    say("announced")
            elif kind == "tracker_error_alert":
                # message() leaves out a UDP tracker's error text; failure_reason() has it.
                reason = a.failure_reason() if hasattr(a, "failure_reason") else ""
                log(kind + ":", a.message(), "| reason:", reason)
            elif kind == "torrent_finished_alert" and not seeding and not finished:
                finished = True
                say("finished")
            elif kind in ("stats_alert", "block_finished_alert", "piece_finished_alert"):
                pass
            else:
                log(kind + ":", a.message())
        st = handle.status()
        if seeding and not seeded and st.state == lt.torrent_status.seeding:
            # The data on disk was checked against the piece hashes.
            seeded = True
            say("seeding")
        if time.time() - last_progress >= 1:
            last_progress = time.time()
            log(
                f"state={st.state} progress={st.progress * 100:.0f}% peers={st.num_peers}"
                f" down={st.total_payload_download} up={st.total_payload_upload}"
            )

    # Leave the swarm the way a user pausing or quitting a client does: pausing the
    # torrent announces event=stopped. Wait for the tracker's reply to that announce
    # before exiting (destroying the session right away can drop the announce, as
    # seen with this libtorrent's Python binding).
    log("stopping: pausing (announces event=stopped)")
    ses.pause()
    deadline = time.time() + 5
    outcome = None
    while outcome is None and time.time() < deadline:
        ses.wait_for_alert(200)
        for a in ses.pop_alerts():
            kind = type(a).__name__
            log(kind + ":", a.message())
            if kind == "tracker_reply_alert":
                outcome = "stopped"
            elif kind == "tracker_error_alert":
                outcome = "stopped with a tracker error"
    del handle
    del ses
    say(outcome or "stopped without a tracker reply within 5 s")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-torrent")
    m.add_argument("file")
    m.add_argument("tracker_url")
    m.add_argument("out")
    for name in ("seed", "leech"):
        c = sub.add_parser(name)
        c.add_argument("torrent")
        c.add_argument("dir")
        c.add_argument("--ip", required=True, help="address to listen on (127.0.0.1 or ::1)")
        c.add_argument("--status", required=True, help="file to append progress lines to")
        c.add_argument("--upload-limit", type=int, default=0, help="bytes per second")
    args = p.parse_args()
    if args.cmd == "make-torrent":
        make_torrent(args)
    else:
        run_client(args, seeding=args.cmd == "seed")


if __name__ == "__main__":
    main()
