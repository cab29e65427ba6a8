// The original handler's four scenarios, one request at a time by default: short (~8 s) and long (~60 s)
// audio, each assisted (speculative decoding, batch size 1) and not (batch size 24). Every
// iteration sends each enabled scenario once, in turn, so the latencies never include queueing
// behind another of our own requests (the ramp script measures that).
//
//   k6 run -e SHORT_AUDIO=/abs/short.wav -e LONG_AUDIO=/abs/long.wav benchmarks/server/k6/transcribe.js
//
// Environment (plus those in lib.js):
//   ITERATIONS    iterations per VU (default 2)
//   VUS           virtual users (default 1; more measures latency under concurrency)
//   SCENARIOS     comma-separated subset of the four (default all)
//   ASSISTED      auto (default: ask the server once, skip the assisted scenarios if it has no
//                 assistant), true (always run them), false (skip them)
//   MAX_DURATION  hard stop for the whole run (default 30m)
import { Trend } from 'k6/metrics';
import {
  ERROR_THRESHOLDS, SCENARIOS, SETUP_TIMEOUT, TREND_STATS, checkTranscript, loadAudioBase64, post, probeAssisted,
  requestBody, summaryOutputs,
} from './lib.js';

const AUDIO = {
  short: loadAudioBase64(__ENV.SHORT_AUDIO || '../.cache/audio/short.wav'),
  long: loadAudioBase64(__ENV.LONG_AUDIO || '../.cache/audio/long.wav'),
};
const ASSISTED = (__ENV.ASSISTED || 'auto').toLowerCase();
const SELECTED = (__ENV.SCENARIOS || Object.keys(SCENARIOS).join(','))
  .split(',')
  .map((name) => name.trim())
  .filter((name) => name.length > 0);
for (const name of SELECTED) {
  if (!(name in SCENARIOS)) {
    throw new Error(`unknown scenario ${name}; choose from ${Object.keys(SCENARIOS).join(', ')}`);
  }
}
if (!['auto', 'true', 'false'].includes(ASSISTED)) {
  throw new Error(`ASSISTED must be auto, true or false, not ${ASSISTED}`);
}

const BODIES = {};
const TRENDS = {};
for (const name of SELECTED) {
  BODIES[name] = requestBody(AUDIO[SCENARIOS[name].clip], SCENARIOS[name].parameters);
  TRENDS[name] = new Trend(name, true);
}

export const options = {
  scenarios: {
    transcribe: {
      executor: 'per-vu-iterations',
      vus: parseInt(__ENV.VUS || '1', 10),
      iterations: parseInt(__ENV.ITERATIONS || '2', 10),
      maxDuration: __ENV.MAX_DURATION || '30m',
    },
  },
  thresholds: ERROR_THRESHOLDS,
  summaryTrendStats: TREND_STATS,
  setupTimeout: SETUP_TIMEOUT,
};

// Runs once: decides which scenarios run and warms the server up (the first request after
// loading pays for lazy initialisation, which is not what the latencies should show).
export function setup() {
  const wantsAssisted = SELECTED.some((name) => SCENARIOS[name].decoding === 'assisted');
  let assisted = { supported: ASSISTED !== 'false', reason: ASSISTED === 'false' ? 'ASSISTED=false' : null };
  if (wantsAssisted && ASSISTED === 'auto') {
    const probe = probeAssisted(requestBody(AUDIO.short, SCENARIOS.short_assisted.parameters));
    assisted = { supported: probe.supported, reason: `the server refused an assisted request: ${probe.reason}` };
  }
  post(requestBody(AUDIO.short, SCENARIOS.short_not_assisted.parameters), { name: 'warm_up' });
  const scenarios = {};
  for (const name of SELECTED) {
    const runs = SCENARIOS[name].decoding !== 'assisted' || assisted.supported;
    scenarios[name] = {
      status: runs ? 'ran' : 'skipped',
      reason: runs ? null : assisted.reason,
      clip: SCENARIOS[name].clip,
      parameters: SCENARIOS[name].parameters,
    };
  }
  return { scenarios: scenarios };
}

export default function (data) {
  for (const name of SELECTED) {
    if (data.scenarios[name].status !== 'ran') {
      continue;
    }
    const res = post(BODIES[name], { name: name });
    if (checkTranscript(res, SCENARIOS[name].decoding)) {
      TRENDS[name].add(res.timings.duration);
    }
  }
}

export function handleSummary(data) {
  return summaryOutputs(data, { script: 'transcribe', scenarios: (data.setup_data || {}).scenarios || {} });
}
