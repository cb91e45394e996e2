// Signs an artifact with @sigstore/sign's MessageSignatureBundleBuilder (no Fulcio, no Rekor,
// no TSA: key-based, offline) using a fresh P-256 key made by Node's crypto. Writes the bundle
// and the public key PEM. Usage: node sign.js ARTIFACT OUT_BUNDLE OUT_PUBLIC_KEY_PEM
'use strict';
const fs = require('fs');
const crypto = require('crypto');
const { MessageSignatureBundleBuilder } = require('@sigstore/sign');
const { bundleToJSON } = require('@sigstore/bundle');

const [artifactPath, bundlePath, pubPath] = process.argv.slice(2);
const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'P-256' });
const pubPem = publicKey.export({ type: 'spki', format: 'pem' });
const hint = crypto.createHash('sha256')
  .update(publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
const signer = {
  sign: async (data) => ({
    signature: crypto.sign('sha256', data, privateKey),
    key: { $case: 'publicKey', publicKey: pubPem, hint },
  }),
};
(async () => {
  const builder = new MessageSignatureBundleBuilder({ signer, witnesses: [] });
  const bundle = await builder.create({ data: fs.readFileSync(artifactPath) });
  fs.writeFileSync(bundlePath, JSON.stringify(bundleToJSON(bundle)));
  fs.writeFileSync(pubPath, pubPem);
  console.log(`@sigstore/sign: wrote ${bundlePath} (${bundle.mediaType})`);
})().catch((e) => { console.error(`@sigstore/sign: ${e.message}`); process.exit(1); });
