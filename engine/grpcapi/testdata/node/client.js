// The OIP gRPC check's client: Google's @grpc/grpc-js and
// @grpc/proto-loader load the protocol's published proto file (and the
// file with Triton's ModelStreamInferResponse, for the stream) and call a
// batchd server. Usage: node client.js ADDR PROTO_DIR. It prints one JSON
// object of what it got; the Go test (TestNodeClient) checks it. Each call
// has a 10 s deadline.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const [addr, protoDir] = process.argv.slice(2);
const opts = { keepCase: true, longs: Number, defaults: true, includeDirs: [protoDir] };
const def = protoLoader.loadSync('open_inference_grpc.proto', opts);
const inference = grpc.loadPackageDefinition(def).inference;
const client = new inference.GRPCInferenceService(addr, grpc.credentials.createInsecure());
const deadline = () => ({ deadline: Date.now() + 10000 });

function call(method, req) {
  return new Promise((resolve) => {
    client[method](req, deadline(), (err, resp) => resolve({ err, resp }));
  });
}

// raw packs BYTES elements as the protocol's raw contents: a 4-byte
// little-endian length, then the bytes, each.
function raw(elems) {
  const parts = [];
  for (const e of elems) {
    const b = Buffer.from(e, 'utf8');
    const n = Buffer.alloc(4);
    n.writeUInt32LE(b.length);
    parts.push(n, b);
  }
  return Buffer.concat(parts);
}

function unraw(buf) {
  const out = [];
  for (let i = 0; i < buf.length;) {
    const n = buf.readUInt32LE(i);
    out.push(buf.subarray(i + 4, i + 4 + n).toString('utf8'));
    i += 4 + n;
  }
  return out;
}

function stream(n) {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => path.join(protoDir, path.basename(target));
  root.loadSync(['open_inference_grpc.proto', 'triton_stream.proto'], { keepCase: true });
  const Req = root.lookupType('inference.ModelInferRequest');
  const Resp = root.lookupType('inference.ModelStreamInferResponse');
  return new Promise((resolve) => {
    const got = {};
    const errors = [];
    const s = client.makeBidiStreamRequest('/inference.GRPCInferenceService/ModelStreamInfer',
      (m) => Buffer.from(Req.encode(Req.create(m)).finish()),
      (b) => Resp.toObject(Resp.decode(b), { defaults: true }),
      new grpc.Metadata(), deadline());
    s.on('data', (m) => {
      if (m.error_message) {
        errors.push({ id: m.infer_response.id, error: m.error_message });
        return;
      }
      got[m.infer_response.id] = unraw(m.infer_response.raw_output_contents[0])[0];
    });
    s.on('error', (err) => resolve({ got, errors, err: err.code + ' ' + err.details }));
    s.on('end', () => resolve({ got, errors }));
    for (let i = 0; i < n; i++) {
      const model = i === 3 ? 'nope' : 'echo';
      s.write({ model_name: model, id: 'r' + i, inputs: [{ name: 'input', datatype: 'BYTES', shape: [1] }], raw_input_contents: [raw(['s' + i])] });
    }
    s.end();
  });
}

(async () => {
  const out = {};
  let r = await call('ServerLive', {});
  out.live = r.err ? String(r.err) : r.resp.live;
  r = await call('ServerReady', {});
  out.ready = r.err ? String(r.err) : r.resp.ready;
  r = await call('ServerMetadata', {});
  out.server = r.err ? String(r.err) : r.resp.name;
  r = await call('ModelMetadata', { name: 'echo' });
  out.metadata = r.err ? String(r.err) : { versions: r.resp.versions, input: r.resp.inputs[0].datatype, output: r.resp.outputs[0].name };
  r = await call('ModelReady', { name: 'echo' });
  out.model_ready = r.err ? String(r.err) : r.resp.ready;
  // Raw in, raw out (Triton's clients' default).
  r = await call('ModelInfer', { model_name: 'echo', id: 'raw-1', inputs: [{ name: 'input', datatype: 'BYTES', shape: [2] }], raw_input_contents: [raw(['a', 'bé'])] });
  out.infer_raw = r.err ? String(r.err) : { id: r.resp.id, version: r.resp.model_version, outputs: unraw(r.resp.raw_output_contents[0]) };
  // Contents in, contents out.
  r = await call('ModelInfer', { model_name: 'echo', inputs: [{ name: 'input', datatype: 'BYTES', shape: [1], contents: { bytes_contents: [Buffer.from('c')] } }] });
  out.infer_contents = r.err ? String(r.err) : r.resp.outputs[0].contents.bytes_contents.map((b) => b.toString('utf8'));
  // An error: an unknown model is NOT_FOUND (5), a datatype INVALID_ARGUMENT (3).
  r = await call('ModelInfer', { model_name: 'nope', inputs: [{ name: 'input', datatype: 'BYTES', shape: [1], contents: { bytes_contents: [Buffer.from('c')] } }] });
  out.unknown_model_code = r.err ? r.err.code : 0;
  r = await call('ModelInfer', { model_name: 'echo', inputs: [{ name: 'input', datatype: 'FP32', shape: [1] }] });
  out.datatype_code = r.err ? r.err.code : 0;
  out.stream = await stream(50);
  client.close();
  process.stdout.write(JSON.stringify(out) + '\n');
})().catch((e) => { console.error(e); process.exit(1); });
