// The names webtorrent's WebRTC layer (@thaunknown/simple-peer) imports from
// 'webrtc-polyfill', taken from @roamhq/wrtc instead. @roamhq/wrtc is resolved from
// the project's node_modules (this directory is linked there by npm).
import wrtc from '@roamhq/wrtc'

export const { RTCPeerConnection, RTCSessionDescription, RTCIceCandidate } = wrtc
export default wrtc
