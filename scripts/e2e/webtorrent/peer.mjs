// WebTorrent peers for shoal's end-to-end tests (ws.sh, wss.sh).
//
//   node peer.mjs seed  TORRENT DIR STATUS [UPLOAD_LIMIT_BYTES_PER_S]
//   node peer.mjs leech TORRENT DIR STATUS
//
// Each runs one WebTorrent client whose peers connect over WebRTC data channels
// (@roamhq/wrtc, reached through the webrtc-shim package) after the tracker relays
// their offers and answers. It appends lines to STATUS as it gets somewhere:
// "announced" (first tracker reply), "seeding" (a seeder has checked the data on disk
// against the piece hashes and been answered by the tracker), "finished" (download
// complete), and "stopped" on SIGTERM/SIGINT once the client is destroyed (which
// announces event=stopped and closes the tracker connection).
//
// The tracker must be the only way peers meet: DHT, LSD, ut_pex, UPnP and NAT-PMP are
// off, and there are no ICE servers (no STUN/TURN: host candidates only).
import fs from 'node:fs'
import WebTorrent from 'webtorrent'

const [cmd, ...args] = process.argv.slice(2)

const time = () => new Date().toISOString().slice(11, 19)
const log = (...a) => console.log(time(), ...a)

function runPeer ([torrentPath, dir, statusPath, uploadLimit], seeding) {
  const status = fs.openSync(statusPath, 'a')
  const say = line => {
    log(line)
    fs.writeSync(status, line + '\n')
  }

  const client = new WebTorrent({
    dht: false,
    lsd: false,
    utPex: false,
    natUpnp: false,
    natPmp: false,
    webSeeds: false,
    // A seeder that uploads slowly keeps the leecher a leecher for a few seconds,
    // long enough for the test to scrape it as one.
    uploadLimit: uploadLimit ? Number(uploadLimit) : -1,
    tracker: { rtcConfig: { iceServers: [] } }
  })
  client.on('error', err => {
    log('client error:', err.message || err)
    process.exit(1)
  })

  const torrent = client.add(fs.readFileSync(torrentPath), { path: dir })
  let announced = false
  let done = false
  let ready = false
  const checkReady = () => {
    // A seeder is ready once it has both checked its data and been answered by the
    // tracker; the test scrapes it only then.
    if (seeding && announced && done && !ready) {
      ready = true
      say('seeding')
    }
  }
  torrent.on('warning', err => log('warning:', err.message || err))
  torrent.on('error', err => {
    log('torrent error:', err.message || err)
    process.exit(1)
  })
  torrent.on('infoHash', () => log('added', seeding ? 'seed' : 'leech', torrent.infoHash, 'in', dir))
  torrent.on('trackerAnnounce', () => {
    log('tracker reply; peers connected:', torrent.numPeers)
    if (!announced) {
      announced = true
      say('announced')
      checkReady()
    }
  })
  torrent.on('wire', (wire, addr) => log('peer connected:', addr, wire.type || ''))
  torrent.on('done', () => {
    log('done: all pieces verified')
    done = true
    if (!seeding) say('finished')
    checkReady()
  })
  const progress = setInterval(() => {
    log(`progress=${(torrent.progress * 100).toFixed(0)}% peers=${torrent.numPeers}` +
      ` down=${torrent.downloaded} up=${torrent.uploaded}`)
  }, 1000)

  let stopping = false
  const stop = () => {
    if (stopping) return
    stopping = true
    clearInterval(progress)
    log('stopping: destroying the client (closes the tracker connection)')
    client.destroy(err => {
      if (err) log('destroy error:', err.message || err)
      say('stopped')
      process.exit(0)
    })
    // Never hang: the test waits for this process by PID.
    setTimeout(() => {
      log('destroy took over 5 s')
      process.exit(1)
    }, 5000).unref()
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

switch (cmd) {
  case 'seed': runPeer(args, true); break
  case 'leech': runPeer(args, false); break
  default:
    console.error('usage: peer.mjs seed|leech TORRENT DIR STATUS [UPLOAD_LIMIT]')
    process.exit(2)
}
