#!/usr/bin/env python3
"""Private mode against public mode over WebTorrent: one shoal_ws build, the same load,
side by side, with accounting off and on.

Three trackers, each round in a rotating order, pinned to the same CPUs, configured
as scripts/bench/ws_bench.py configures shoal_ws (the load tester is one address, so
the per-client limits are raised; the code paths still run):

  public       shoal_ws;
  private      `[private]` with a users file of --users users and a torrents file of
               --torrents torrents (every torrent of the load among them);
  accounting   the same, and `export_directory` (a batch every 10 s, the default:
               each announce a report to the accounting thread, each batch committed
               to the journal).

The load is shoal_ws_load_test (announces with offers, answers, scrapes, as in
ws_bench.py) with a registered user's passkey in the WebSocket upgrade's path
(`/KEY/announce`: a public tracker ignores the path), so every tracker gets the same
messages and the difference is private mode's work: the key checked at the upgrade,
the user and torrent looked up for each announce and scrape, the report.

Prints every round's messages per second and CPU per message, the ratios to public in
the same round, and the medians.

  cargo build --release --locked -p shoal_ws -p shoal_ws_load_test
  scripts/bench/private_ws.py --shoal-dir target/release
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ws_bench  # noqa: E402
from benchlib import private_rounds, require_idle  # noqa: E402

KEY = "6f0d1b2c3d4e5f60718293a4b5c6d7e8"


class Private(ws_bench.Bench):
    def tracker_cmd(self, tracker, tls, port):
        command = super().tracker_cmd("shoal", tls, port)
        if tracker != "public":
            section = (f'[private]\nenabled = true\nusers_path = "{self.path("users.txt")}"\n'
                       f'torrents_path = "{self.path("torrents.txt")}"\n')
            if tracker == "accounting":
                section += f'export_directory = "{self.path("batches")}"\n'
            with open(command[-1], "a") as config:
                config.write(section)
        return command

    def load_cmd(self, load, tls, port, connections):
        command = super().load_cmd(load, tls, port, connections)
        with open(command[2]) as config:
            text = config.read()
        with open(command[2], "w") as config:
            config.write(text.replace("[network]\n", f'[network]\npath = "/{KEY}/announce"\n', 1))
        return command

    def prepare(self, tls, connections):
        """The users file (user 0 holds KEY; user i's key is i as 32 hex digits) and the
        torrents file (every torrent of the load, then others up to --torrents)."""
        with open(self.path("users.txt"), "w") as f:
            f.write(f"0 {KEY}\n")
            for i in range(1, self.a.users):
                f.write(f"{i} {i:032x}\n")
        load_config = self.load_cmd("shoal", tls, self.a.port, connections)[2]
        hashes = subprocess.run([os.path.join(self.a.shoal_dir, "shoal_ws_load_test"), "-c", load_config,
                                 "--print-info-hashes"], capture_output=True, text=True, check=True).stdout.split()
        with open(self.path("torrents.txt"), "w") as f:
            for i, info_hash in enumerate(hashes):
                f.write(f"{info_hash} {i + 1}\n")
            taken = set(hashes)
            for i in range(len(hashes), self.a.torrents):
                if f"{i:040x}" not in taken:
                    f.write(f"{i:040x} {i + 1}\n")
        os.makedirs(self.path("batches"), exist_ok=True)
        return len(hashes)

    def main(self):
        a = self.a
        require_idle(a.max_load, a.force)
        tls = a.transport == "wss"
        connections = a.connections[0]
        count = self.prepare(tls, connections)
        print(f"{a.users:,} users, {max(a.torrents, count):,} torrents ({count:,} in the load); "
              f"{a.transport}, {connections} connections, {a.offers} offers per announce", flush=True)

        def run_once(tracker):
            r = self.run_once(tracker, "shoal", tls, connections)
            if r["errors"] > 0.01 * r["responses"]:
                sys.exit(f"{tracker}: {r['errors']:.0f} error messages a second (of {r['responses']:.0f}); "
                         f"logs under {self.tmp}")
            return r

        private_rounds(run_once, a.rounds, "responses", "message", self.tmp)


def main():
    p = ws_bench.parser(__doc__)
    p.add_argument("--users", type=int, default=1_000_000)
    p.add_argument("--torrents", type=int, default=1_000_000)
    p.add_argument("--transport", choices=["ws", "wss"], default="ws")
    p.set_defaults(connections=[1000], port=4500)
    a = p.parse_args()
    a.load_testers, a.no_aquatic = ["shoal"], True
    Private(a).main()


if __name__ == "__main__":
    main()
