// Helpers for shoal's WebTorrent end-to-end tests (ws.sh, wss.sh); kept apart from
// peer.mjs so that they start fast (no WebTorrent or WebRTC to load): the scrape
// checks are timed against a download in progress.
//
//   node tools.mjs make-torrent FILE TRACKER_URL OUT.torrent    prints the info hash (hex)
//   node tools.mjs scrape TRACKER_URL INFO_HASH_HEX S,L,D [TIMEOUT_S]
//   node tools.mjs upgrade TRACKER_URL ORIGIN|- STATUS
//
// scrape prints "seeders=S leechers=L downloads=D" and, polling, waits until the
// tracker reports exactly the expected counts; exits 1 with the last counts seen
// when it does not within TIMEOUT_S (default 15).
import fs from 'node:fs'
import createTorrent from 'create-torrent'
import parseTorrent from 'parse-torrent'
import WebSocket from 'ws'

const [cmd, ...args] = process.argv.slice(2)

function makeTorrent ([file, trackerUrl, out]) {
  // announceList given explicitly: create-torrent adds public trackers otherwise.
  createTorrent(file, { announceList: [[trackerUrl]], createdBy: 'shoal e2e', urlList: [] }, async (err, buf) => {
    if (err) throw err
    fs.writeFileSync(out, buf)
    const parsed = await parseTorrent(buf)
    if (JSON.stringify(parsed.announce) !== JSON.stringify([trackerUrl])) {
      console.error(`the torrent names trackers ${JSON.stringify(parsed.announce)}, expected only ${trackerUrl}`)
      process.exit(1)
    }
    console.log(parsed.infoHash)
  })
}

// One scrape over a WebSocket connection: {"action":"scrape","info_hash":...} with the
// info hash as 20 characters, one per byte (as WebTorrent sends it).
function scrapeOnce (url, infoHashHex) {
  const binary = Buffer.from(infoHashHex, 'hex').toString('latin1')
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url)
    const timer = setTimeout(() => {
      ws.terminate()
      reject(new Error('no scrape reply within 2 s'))
    }, 2000)
    ws.on('open', () => ws.send(JSON.stringify({ action: 'scrape', info_hash: binary })))
    ws.on('message', data => {
      clearTimeout(timer)
      ws.close()
      let msg
      try {
        msg = JSON.parse(data.toString())
      } catch (e) {
        return reject(new Error(`not JSON: ${data}`))
      }
      if (msg['failure reason']) return reject(new Error(`failure reason: ${msg['failure reason']}`))
      const file = (msg.files || {})[binary]
      // A tracker that does not know the torrent may leave it out.
      resolve(file ? [file.complete, file.incomplete, file.downloaded] : [0, 0, 0])
    })
    ws.on('error', err => {
      clearTimeout(timer)
      reject(err)
    })
  })
}

// Scrapes every 0.25 s (well under the tracker's per-connection rate limit, and each
// scrape is a new connection anyway) until the counts are the expected ones.
async function scrape ([url, infoHashHex, expected, timeout = '15']) {
  const want = expected.split(',').map(Number)
  const deadline = Date.now() + Number(timeout) * 1000
  let last = null
  let error = null
  for (;;) {
    try {
      last = await scrapeOnce(url, infoHashHex)
      error = null
    } catch (e) {
      error = e
    }
    if (last && last.every((v, i) => v === want[i])) break
    if (Date.now() >= deadline) break
    await new Promise(resolve => setTimeout(resolve, 250))
  }
  if (!last) {
    console.error(`scrape of ${url} failed: ${error && error.message}`)
    process.exit(1)
  }
  console.log(`seeders=${last[0]} leechers=${last[1]} downloads=${last[2]}`)
  if (!last.every((v, i) => v === want[i])) {
    console.error(`expected seeders=${want[0]} leechers=${want[1]} downloads=${want[2]}` +
      (error ? ` (last error: ${error.message})` : ''))
    process.exit(1)
  }
  process.exit(0)
}

// Opens a WebSocket with ORIGIN as its Origin header (as a browser on that page
// would; "-": none, as Node clients send) and checks the status of the upgrade's
// answer: 101 when it opens, else the refusal's.
function upgrade ([url, origin, expected]) {
  const ws = new WebSocket(url, origin === '-' ? {} : { origin })
  const done = (status, body) => {
    console.log(`origin ${origin}: ${status}${body ? ` (${body.trim()})` : ''}`)
    process.exit(String(status) === expected ? 0 : 1)
  }
  const timer = setTimeout(() => done('no answer in 5 s'), 5000)
  ws.on('open', () => {
    clearTimeout(timer)
    ws.close()
    done(101)
  })
  ws.on('unexpected-response', (_, response) => {
    clearTimeout(timer)
    let body = ''
    response.on('data', chunk => { body += chunk })
    response.on('end', () => done(response.statusCode, body))
  })
  ws.on('error', err => {
    clearTimeout(timer)
    done(`error: ${err.message}`)
  })
}

switch (cmd) {
  case 'make-torrent': makeTorrent(args); break
  case 'scrape': scrape(args); break
  case 'upgrade': upgrade(args); break
  default:
    console.error('usage: tools.mjs make-torrent FILE URL OUT | scrape URL INFO_HASH S,L,D [TIMEOUT_S] | upgrade URL ORIGIN|- STATUS')
    process.exit(2)
}
