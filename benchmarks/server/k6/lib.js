// Shared by the k6 scripts: configuration from the environment, request payloads, the request
// itself with its checks, and the JSON summary. Works against the self-hosted server and against
// an Inference Endpoint alike: both take POST / with {"inputs": base64 audio, "parameters": {...}}.
//
// Environment:
//   BASE_URL         server or endpoint URL (default http://127.0.0.1:8000)
//   HF_TOKEN         bearer token for an Inference Endpoint (or API_KEY for the server)
//   SHORT_AUDIO      audio file for the short scenarios (absolute path, or relative to this folder)
//   LONG_AUDIO       audio file for the long scenarios
//   REQUEST_TIMEOUT  per request (default 600s: a long clip on a CPU takes minutes)
//   SUMMARY_JSON     where handleSummary writes the JSON summary (default summary.json)
import http from 'k6/http';
import encoding from 'k6/encoding';
import { check } from 'k6';

export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8000').replace(/\/+$/, '');
const TOKEN = __ENV.HF_TOKEN || __ENV.API_KEY || '';
const REQUEST_TIMEOUT = __ENV.REQUEST_TIMEOUT || '600s';

// The original handler's four scenarios: the assisted ones decode with the assistant at batch size 1, the
// others batch 24 windows at a time (the original handler's default). Names are the custom Trend metrics.
export const SCENARIOS = {
  short_assisted: { clip: 'short', parameters: { assisted: true, batch_size: 1 }, decoding: 'assisted' },
  short_not_assisted: { clip: 'short', parameters: { assisted: false, batch_size: 24 }, decoding: 'batched' },
  long_assisted: { clip: 'long', parameters: { assisted: true, batch_size: 1 }, decoding: 'assisted' },
  long_not_assisted: { clip: 'long', parameters: { assisted: false, batch_size: 24 }, decoding: 'batched' },
};

// setup() sends a warm-up request, which on a CPU can take minutes (k6's default limit is 60 s).
export const SETUP_TIMEOUT = __ENV.SETUP_TIMEOUT || '20m';

// Every latency table shows these, as the original handler's did.
export const TREND_STATS = ['avg', 'min', 'med', 'max', 'p(90)', 'p(95)', 'count'];

// Requests fail only on transport errors or non-2xx answers; both count against this.
export const ERROR_THRESHOLDS = {
  http_req_failed: ['rate<0.01'],
  checks: ['rate>0.99'],
};

// open() only works in the init context, so each script calls this at load time.
export function loadAudioBase64(path) {
  return encoding.b64encode(open(path, 'b'));
}

export function requestBody(audioBase64, parameters) {
  return JSON.stringify({ inputs: audioBase64, parameters: parameters });
}

export function post(body, tags, responseCallback) {
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json' };
  if (TOKEN) {
    headers.Authorization = `Bearer ${TOKEN}`;
  }
  const params = { headers: headers, timeout: REQUEST_TIMEOUT, tags: tags };
  if (responseCallback) {
    params.responseCallback = responseCallback;
  }
  return http.post(`${BASE_URL}/`, body, params);
}

function parseJson(res) {
  try {
    return res.json();
  } catch (error) {
    return null;
  }
}

// Status, a transcript, and (when the response says) the decoding path that was asked for: an
// "assisted" scenario that silently ran batched would otherwise measure the wrong thing.
export function checkTranscript(res, expectedDecoding) {
  const body = parseJson(res);
  return check(res, {
    'status is 200': (r) => r.status === 200,
    'response has text': () => body !== null && typeof body.text === 'string' && body.text.trim().length > 0,
    'decoding as requested': () =>
      body !== null && (body.decoding === undefined || body.decoding === expectedDecoding),
  });
}

// Whether the server accepts assisted=true: one short assisted request, whose 4xx refusal (no
// assistant loaded) is expected and so not counted as a failed request. It also warms up the
// assisted path when there is one.
export function probeAssisted(shortBody) {
  const res = post(shortBody, { name: 'probe_assisted' }, http.expectedStatuses({ min: 200, max: 499 }));
  if (res.status === 200) {
    return { supported: true, reason: null };
  }
  const body = parseJson(res);
  // {"error": {"message": ...}} (this server, OpenAI style), {"error": "..."} (Inference
  // Endpoints), {"detail": ...} (FastAPI defaults)
  const error = body && (body.error || body.detail || body.message);
  const message = error && typeof error.message === 'string' ? error.message : error;
  return {
    supported: false,
    reason: `HTTP ${res.status}: ${typeof message === 'string' ? message : JSON.stringify(message || res.body)}`,
  };
}

function seconds(ms) {
  return ms === undefined ? '-' : (ms / 1000).toFixed(2);
}

// A short text summary for the console (the built-in one is replaced by handleSummary) and the
// whole summary as JSON for the runner, plus what this script adds under "whosaid".
export function summaryOutputs(data, extra) {
  const lines = [];
  for (const [name, metric] of Object.entries(data.metrics)) {
    if (metric.type === 'trend' && metric.contains === 'time' && !name.startsWith('http_req_') && name !== 'iteration_duration') {
      const v = metric.values;
      lines.push(
        `${name.padEnd(20)} n=${String(v.count).padStart(3)}  avg ${seconds(v.avg)} s  min ${seconds(v.min)}  ` +
          `med ${seconds(v.med)}  max ${seconds(v.max)}  p90 ${seconds(v['p(90)'])}  p95 ${seconds(v['p(95)'])}`,
      );
    }
  }
  for (const [name, metric] of Object.entries(data.metrics)) {
    for (const [threshold, result] of Object.entries(metric.thresholds || {})) {
      lines.push(`threshold ${name} ${threshold}: ${result.ok ? 'ok' : 'FAILED'}`);
    }
  }
  for (const [name, info] of Object.entries(extra.scenarios || {})) {
    if (info.status !== 'ran') {
      lines.push(`${name}: ${info.status}${info.reason ? ` (${info.reason})` : ''}`);
    }
  }
  const summary = Object.assign({}, data, { whosaid: extra });
  return {
    stdout: lines.join('\n') + '\n',
    [__ENV.SUMMARY_JSON || 'summary.json']: JSON.stringify(summary, null, 2),
  };
}
