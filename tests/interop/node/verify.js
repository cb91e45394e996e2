// Verifies a key-based sigstore bundle with @sigstore/verify (an implementation independent of
// germline's): a pinned public key, an empty trust root (no CAs, no logs, no TSAs) and no
// transparency-log or timestamp requirement. Usage: node verify.js BUNDLE ARTIFACT PUBLIC_KEY_PEM
'use strict';
const fs = require('fs');
const crypto = require('crypto');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const [bundlePath, artifactPath, keyPath] = process.argv.slice(2);
const bundle = bundleFromJSON(JSON.parse(fs.readFileSync(bundlePath, 'utf8')));
const artifact = fs.readFileSync(artifactPath);
const publicKey = crypto.createPublicKey(fs.readFileSync(keyPath));
const hint = crypto.createHash('sha256')
  .update(publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
const emptyRoot = { certificateAuthorities: [], timestampAuthorities: [], tlogs: [], ctlogs: [] };
const trust = toTrustMaterial(emptyRoot, (h) => {
  if (h !== hint) throw new Error(`unknown key hint ${h}`);
  return { publicKey, validFor: () => true };
});
const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });
try {
  verifier.verify(toSignedEntity(bundle, artifact));
} catch (e) {
  console.error(`@sigstore/verify: ${e.code || ''} ${e.message}`);
  process.exit(1);
}
console.log(`@sigstore/verify: OK ${bundle.mediaType} hint=${hint}`);
