// Concurrency ramp: more and more users send the short clip (not assisted, batch size 24, which
// every server supports) back to back. Shows how latency grows with queueing and where the
// server starts refusing work (429 once its job queue is full).
//
//   k6 run -e SHORT_AUDIO=/abs/short.wav -e RAMP_STAGES=30s:1,30s:2,30s:4 benchmarks/server/k6/ramp.js
//
// Environment (plus those in lib.js):
//   RAMP_STAGES   comma-separated duration:target-VUs steps (default 20s:1,20s:2,20s:4: sized for a
//                 2-core CPU; on a GPU try 30s:1,30s:4,30s:8,30s:16)
//   RAMP_DOWN     how long requests in flight may finish after the last stage (default 120s)
import { Counter, Trend } from 'k6/metrics';
import {
  ERROR_THRESHOLDS, SCENARIOS, SETUP_TIMEOUT, TREND_STATS, checkTranscript, loadAudioBase64, post, requestBody,
  summaryOutputs,
} from './lib.js';

const SCENARIO = SCENARIOS.short_not_assisted;
const BODY = requestBody(loadAudioBase64(__ENV.SHORT_AUDIO || '../.cache/audio/short.wav'), SCENARIO.parameters);
const STAGES = (__ENV.RAMP_STAGES || '20s:1,20s:2,20s:4').split(',').map((step) => {
  const [duration, target] = step.trim().split(':');
  if (!duration || !/^\d+$/.test(target || '')) {
    throw new Error(`RAMP_STAGES step ${step} is not duration:vus (e.g. 20s:2)`);
  }
  return { duration: duration, target: parseInt(target, 10) };
});

const rampLatency = new Trend('ramp_latency', true);
const busyRefusals = new Counter('busy_refusals');

export const options = {
  scenarios: {
    ramp: {
      executor: 'ramping-vus',
      startVUs: 1,
      // Each stage holds its VU count: jump at the stage start, then stay (k6 ramps linearly
      // within a stage, so a zero-length step to the target precedes each hold).
      stages: STAGES.flatMap((stage) => [{ duration: '0s', target: stage.target }, stage]),
      gracefulRampDown: __ENV.RAMP_DOWN || '120s',
      gracefulStop: __ENV.RAMP_DOWN || '120s',
    },
  },
  thresholds: ERROR_THRESHOLDS,
  summaryTrendStats: TREND_STATS,
  setupTimeout: SETUP_TIMEOUT,
};

export function setup() {
  post(BODY, { name: 'warm_up' });
  return { stages: STAGES, parameters: SCENARIO.parameters };
}

export default function () {
  const res = post(BODY, { name: 'ramp' });
  if (res.status === 429) {
    busyRefusals.add(1);
  }
  if (checkTranscript(res, SCENARIO.decoding)) {
    rampLatency.add(res.timings.duration);
  }
}

export function handleSummary(data) {
  return summaryOutputs(data, {
    script: 'ramp',
    stages: (data.setup_data || {}).stages || STAGES,
    scenarios: { ramp: { status: 'ran', clip: 'short', parameters: SCENARIO.parameters } },
  });
}
