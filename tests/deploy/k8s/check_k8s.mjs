// Checks the Kubernetes manifests of deploy/k8s offline, as ctest's test_deploy_k8s:
//   node tests/deploy/k8s/check_k8s.mjs [REPOSITORY_ROOT]
// Renders the base, each overlay, the models kustomization and the GPU component on top of
// the external-etcd overlay with `kubectl kustomize` (no cluster), and validates every object
// against the Kubernetes JSON schemas of `kubernetes-models` (pinned by package-lock.json,
// installed by `npm ci` here; scripts/setup.sh does it). The schemas catch wrong types and
// missing required fields, not unknown ones, so the invariants below name the fields that
// matter: the probes, the drain, the volumes, the security context, the etcd cluster, and
// each daemon's effective config (its ConfigMap file plus the command-line overrides of its
// container, as the daemons apply them: docs/CONFIG.md). Every failure names the render, the
// object and what is wrong; all are reported together. Without node, kubectl or the npm
// packages it prints "SKIPPED: <why>" (ctest reports Skipped, never Passed).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(process.argv[2] ?? path.join(here, '..', '..', '..'));
const k8s = path.join(root, 'deploy', 'k8s');

const kScdUid = 10001;                 // the images' user scd (deploy/docker)
const kDrainDefault = 30;              // drain_timeout's default, seconds (docs/CONFIG.md)
const kGraceDefault = 30;              // terminationGracePeriodSeconds' default in Kubernetes
const kSecretName = /TOKEN|PASSWORD|API_KEY|SECRET/;

function skip(why) {
  console.log(`SKIPPED: ${why}`);
  process.exit(0);
}

if (spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error) {
  skip('kubectl is not installed (it renders deploy/k8s with `kubectl kustomize`)');
}
for (const pkg of ['kubernetes-models', 'yaml']) {
  if (!fs.existsSync(path.join(here, 'node_modules', pkg, 'package.json'))) {
    skip(`the npm package ${pkg} is not installed (run \`npm ci\` in ${here})`);
  }
}
const YAML = await import('yaml');

const failures = [];
function fail(where, what) {
  failures.push(`${where}: ${what}`);
}
function objectName(o) {
  return `${o?.kind ?? '?'}/${o?.metadata?.name ?? '?'}`;
}

// ---- rendering and schema validation

function render(dir) {
  const r = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`kubectl kustomize ${dir} failed:\n${r.stderr}`);
  return YAML.parseAllDocuments(r.stdout).map((d) => d.toJS()).filter((o) => o !== null);
}

const modelCache = new Map();
async function schemaModel(apiVersion, kind) {
  if (!modelCache.has(apiVersion)) {
    modelCache.set(apiVersion, await import(`kubernetes-models/${apiVersion}`).catch(() => null));
  }
  return modelCache.get(apiVersion)?.[kind];
}

async function validateSchemas(renderName, objects) {
  for (const o of objects) {
    const where = `${renderName}: ${objectName(o)}`;
    const Model = await schemaModel(o.apiVersion, o.kind);
    if (Model === undefined) {
      fail(where, `no kubernetes-models schema for ${o.apiVersion} ${o.kind}`);
      continue;
    }
    try {
      new Model(o).validate();
    } catch (e) {
      fail(where, `schema: ${e.message}`);
    }
  }
}

// ---- the daemons' effective config

// A duration as the daemons read it: seconds, or a number with ms, s, m or h.
function seconds(value) {
  if (typeof value === 'number') return value;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(String(value));
  if (!m) return NaN;
  return Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
}

function getKey(config, dotted) {
  return dotted.split('.').reduce((node, k) => (node == null ? undefined : node[k]), config);
}

// `--a.b=VALUE` overrides as common/config/daemon_config.h applies them: '-' is '_' in keys,
// VALUE is a YAML value ('...' a string). $(VAR) stays as written: the kubelet expands it.
function applyOverrides(config, args) {
  const out = structuredClone(config);
  for (const arg of args ?? []) {
    const m = /^--([A-Za-z0-9_.-]+)=(.*)$/.exec(arg);
    if (!m || m[1] === 'config') continue;
    const keys = m[1].replaceAll('-', '_').split('.');
    let node = out;
    for (const k of keys.slice(0, -1)) node = node[k] ??= {};
    node[keys.at(-1)] = m[2] === '' ? '' : YAML.parse(m[2]);
  }
  return out;
}

function configMapFile(objects, configMapName, file) {
  const cm = objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === configMapName);
  return cm?.data?.[file];
}

// The daemon config a container reads: the ConfigMap file mounted at /etc/scd/*.yaml.
function mountedConfig(where, objects, pod, container) {
  const configFile = /^\/etc\/scd\/[^/]+\.yaml$/;
  const mount = (container.volumeMounts ?? []).find((m) => configFile.test(m.mountPath));
  if (!mount) return fail(where, 'no config mounted at /etc/scd/*.yaml');
  const volume = (pod.volumes ?? []).find((v) => v.name === mount.name);
  const file = mount.subPath ?? path.basename(mount.mountPath);
  const text = volume?.configMap && configMapFile(objects, volume.configMap.name, file);
  if (text === undefined) return fail(where, `${mount.mountPath}: no ConfigMap file ${file}`);
  return { file, config: YAML.parse(text) };
}

// ---- the invariants of an SCD-Serve container

function containerPorts(container) {
  const ports = container.ports ?? [];
  return new Map(ports.map((p) => [p.name ?? String(p.containerPort), p.containerPort]));
}

function probePort(container, probe) {
  const port = probe?.httpGet?.port;
  return typeof port === 'number' ? port : containerPorts(container).get(port);
}

function checkProbes(where, container, httpPort) {
  const probes = { livenessProbe: '/health', readinessProbe: '/ready' };
  for (const [field, wanted] of Object.entries(probes)) {
    const probe = container[field];
    if (probe?.httpGet?.path !== wanted) {
      fail(where, `${field} must GET ${wanted}, has ${JSON.stringify(probe?.httpGet ?? probe)}`);
    } else if (probePort(container, probe) !== httpPort) {
      const port = probe.httpGet.port;
      fail(where, `${field} probes port ${port}, the config's HTTP port is ${httpPort}`);
    }
  }
}

function checkSecurity(where, pod, container) {
  const podSc = pod.securityContext ?? {};
  const sc = container.securityContext ?? {};
  if (!(sc.runAsNonRoot ?? podSc.runAsNonRoot)) fail(where, 'runAsNonRoot is not set');
  if ((sc.runAsUser ?? podSc.runAsUser) !== kScdUid) fail(where, `runAsUser is not ${kScdUid}`);
  if (sc.readOnlyRootFilesystem !== true) fail(where, 'readOnlyRootFilesystem is not true');
  if (sc.allowPrivilegeEscalation !== false) fail(where, 'allowPrivilegeEscalation is not false');
  if (!(sc.capabilities?.drop ?? []).includes('ALL')) fail(where, 'capabilities do not drop ALL');
  for (const kind of ['requests', 'limits']) {
    for (const resource of ['cpu', 'memory']) {
      if (container.resources?.[kind]?.[resource] === undefined) {
        fail(where, `resources.${kind}.${resource} is not set`);
      }
    }
  }
}

// Every $(VAR) of the arguments must be a variable of the container: the kubelet passes an
// undefined reference on as it is written. Secrets come from Secrets, never from literals.
function checkEnv(where, container) {
  const env = new Map((container.env ?? []).map((e) => [e.name, e]));
  for (const arg of [...(container.command ?? []), ...(container.args ?? [])]) {
    for (const [, name] of arg.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
      if (!env.has(name)) {
        fail(where, `argument ${arg} uses $(${name}), which the container does not define`);
      }
    }
  }
  for (const [name, e] of env) {
    if (kSecretName.test(name) && !e.valueFrom?.secretKeyRef) {
      fail(where, `env ${name} must come from a Secret (secretKeyRef)`);
    }
  }
  return env;
}

// Models and artifacts: every path of the config lies on a read-only mount of a
// PersistentVolumeClaim, so nothing the daemon loads comes from the image.
function checkModelPaths(where, pod, container, config) {
  const pvcMounts = (container.volumeMounts ?? []).filter((m) => {
    const v = (pod.volumes ?? []).find((vol) => vol.name === m.name);
    return v?.persistentVolumeClaim && m.readOnly === true;
  });
  for (const dir of ['/srv/scd/models', '/srv/scd/artifacts']) {
    if (!pvcMounts.some((m) => m.mountPath === dir)) {
      fail(where, `${dir} is not a read-only PersistentVolumeClaim mount`);
    }
  }
  const paths = [
    config.base_model,
    config.model?.path,
    config.model?.artifact,
    config.model?.producer_path,
    ...(config.specialists ?? []).flatMap((s) => [s.artifact, s.consumer_path]),
  ];
  for (const p of paths.filter((p) => typeof p === 'string' && p !== '')) {
    if (!pvcMounts.some((m) => p.startsWith(`${m.mountPath}/`))) {
      fail(where, `config path ${p} is not on a read-only PersistentVolumeClaim mount`);
    }
  }
}

function portOf(address) {
  return Number(String(address).split(':').at(-1));
}

// Listens on all interfaces, on the container's declared ports; a decode daemon announces its
// pod IP, and needs no control_plane.address with the etcd registry.
function checkAddresses(where, container, env, config, isDecode) {
  const declared = new Set(containerPorts(container).values());
  const listens = [config.grpc?.listen];
  if (isDecode) listens.push(config.data_plane?.listen);
  for (const address of listens) {
    if (!String(address).startsWith('0.0.0.0:')) {
      fail(where, `listen address ${address} is not 0.0.0.0`);
    }
    if (!declared.has(portOf(address))) {
      fail(where, `listen port of ${address} is not a container port`);
    }
  }
  if (config.http?.host !== '0.0.0.0') fail(where, `http.host ${config.http?.host} is not 0.0.0.0`);
  if (!declared.has(config.http?.port)) {
    fail(where, `http.port ${config.http?.port} is not a container port`);
  }
  if (!isDecode) return;
  if (env.get('POD_IP')?.valueFrom?.fieldRef?.fieldPath !== 'status.podIP') {
    fail(where, 'POD_IP does not come from status.podIP');
  }
  for (const key of ['grpc', 'data_plane']) {
    const wanted = `$(POD_IP):${portOf(config[key]?.listen)}`;
    if (config[key]?.advertise !== wanted) {
      fail(where, `${key}.advertise is ${config[key]?.advertise}, not ${wanted}`);
    }
  }
  if (config.control_plane?.address !== undefined) {
    fail(where, 'control_plane.address is set; the etcd registry needs none');
  }
}

// One SCD-Serve container (an image scd-serve/*) of a Deployment; returns its effective config.
function checkScdContainer(where, objects, workload, container, gpu) {
  const pod = workload.spec.template.spec;
  const mounted = mountedConfig(where, objects, pod, container);
  if (!mounted) return undefined;
  const config = applyOverrides(mounted.config, container.args);
  const isDecode = container.image.startsWith('scd-serve/decode');
  const httpPort = config.http?.port ?? (isDecode ? -1 : 8000);  // the daemons' defaults
  checkProbes(where, container, httpPort);
  checkSecurity(where, pod, container);
  const env = checkEnv(where, container);
  checkModelPaths(where, pod, container, config);
  checkAddresses(where, container, env, config, isDecode);
  const drain = seconds(config.drain_timeout ?? kDrainDefault);
  const grace = pod.terminationGracePeriodSeconds ?? kGraceDefault;
  if (!(grace > drain)) {
    fail(where, `terminationGracePeriodSeconds ${grace} is not longer than drain_timeout ` +
                `${drain}s`);
  }
  if (config.control_plane?.registry !== 'etcd') fail(where, 'control_plane.registry is not etcd');
  const gpus = container.resources?.limits?.['nvidia.com/gpu'];
  if (gpu && (gpus === undefined || config.backend !== 'cuda')) {
    fail(where, 'a GPU render needs nvidia.com/gpu and backend cuda ' +
                `(has ${gpus}, ${config.backend})`);
  }
  if (!gpu && (gpus !== undefined || config.backend === 'cuda')) {
    fail(where, 'a CPU render requests a GPU or runs the cuda backend');
  }
  return { config, isDecode };
}

// ---- the etcd cluster and the objects around the daemons

function endpointsOf(config) {
  return String(config.control_plane?.etcd_endpoints ?? '').split(',').filter((e) => e !== '');
}

function checkEtcd(renderName, objects, configs, externalEtcd) {
  const sets = objects.filter((o) => o.kind === 'StatefulSet' && o.metadata.name === 'etcd');
  if (externalEtcd) {
    if (sets.length) fail(renderName, 'an external-etcd render still has the etcd StatefulSet');
    for (const { where, config } of configs) {
      if (endpointsOf(config).some((e) => /\/\/etcd-\d+\.etcd:/.test(e))) {
        const endpoints = config.control_plane.etcd_endpoints;
        fail(where, `etcd_endpoints still name the in-cluster etcd: ${endpoints}`);
      }
    }
    return;
  }
  const sts = sets[0];
  if (!sts) return fail(renderName, 'no StatefulSet etcd');
  const where = `${renderName}: ${objectName(sts)}`;
  const replicas = sts.spec.replicas;
  if (replicas !== 3) fail(where, `replicas is ${replicas}, not 3`);
  const serviceName = sts.spec.serviceName;
  const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === serviceName);
  if (service?.spec?.clusterIP !== 'None') {
    fail(where, `serviceName ${serviceName} is not a headless Service`);
  }
  const claims = (sts.spec.volumeClaimTemplates ?? []).map((c) => c.metadata.name);
  const etcd = sts.spec.template.spec.containers[0];
  if (!(etcd.volumeMounts ?? []).some((m) => claims.includes(m.name))) {
    fail(where, 'no per-member volume claim mounted');
  }
  const members = [...Array(replicas).keys()].map((i) => `etcd-${i}.${serviceName}`);
  const wantedCluster = members.map((m, i) => `etcd-${i}=http://${m}:2380`).join(',');
  if (!etcd.args.includes(`--initial-cluster=${wantedCluster}`)) {
    fail(where, `--initial-cluster is not ${wantedCluster}`);
  }
  const wantedEndpoints = members.map((m) => `http://${m}:2379`).join(',');
  for (const { where: w, config } of configs) {
    if (endpointsOf(config).join(',') !== wantedEndpoints) {
      const endpoints = config.control_plane?.etcd_endpoints;
      fail(w, `etcd_endpoints ${endpoints} are not the members ${wantedEndpoints}`);
    }
  }
}

function checkServicesAndSpecialists(renderName, objects, scd) {
  const prefill = scd.filter((s) => !s.isDecode);
  const decode = scd.filter((s) => s.isDecode);
  if (!prefill.length || !decode.length) {
    return fail(renderName, 'no prefill or no decode Deployment');
  }
  const service = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'scd-prefill');
  const labels = prefill[0].workload.spec.template.metadata.labels;
  if (!service) {
    fail(renderName, 'no Service scd-prefill');
  } else {
    const where = `${renderName}: ${objectName(service)}`;
    const ports = service.spec.ports.map((p) => p.port);
    for (const port of [8000, 7000]) {
      if (!ports.includes(port)) fail(where, `does not expose ${port}`);
    }
    if (!Object.entries(service.spec.selector).every(([k, v]) => labels[k] === v)) {
      fail(where, 'selector does not match the prefill pods');
    }
  }
  for (const s of prefill[0].config.specialists ?? []) {
    const replicas = decode.filter((d) => d.config.model?.name === s.name);
    if (!replicas.length) fail(renderName, `specialist ${s.name} has no decode Deployment`);
    for (const d of replicas) {
      if (d.workload.spec.replicas < 2) {
        fail(d.where, 'a specialist needs at least 2 decode replicas');
      }
    }
  }
}

// The invariants of a render of the base or an overlay.
function checkRender(renderName, objects, { gpu = false, externalEtcd = false } = {}) {
  for (const o of objects.filter((o) => o.kind === 'Secret')) {
    fail(`${renderName}: ${objectName(o)}`,
         'a Secret is rendered; secrets are created in the cluster, not committed');
  }
  const scd = [];
  const workloads = objects.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet');
  for (const workload of workloads) {
    for (const container of workload.spec?.template?.spec?.containers ?? []) {
      if (!String(container.image).startsWith('scd-serve/')) continue;
      const where = `${renderName}: ${objectName(workload)} container ${container.name}`;
      const checked = checkScdContainer(where, objects, workload, container, gpu);
      if (checked) scd.push({ where, workload, ...checked });
    }
  }
  checkEtcd(renderName, objects, scd, externalEtcd);
  checkServicesAndSpecialists(renderName, objects, scd);
}

// ---- the config files themselves, and the models volume

function checkConfigFiles() {
  const dir = path.join(k8s, 'configs');
  const files = fs.readdirSync(dir)
    .filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
  if (!files.length) fail('deploy/k8s/configs', 'no config files');
  for (const f of files) {
    const config = YAML.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
    if (getKey(config, 'control_plane.registry') !== 'etcd') {
      fail(`deploy/k8s/configs/${f}`, 'control_plane.registry is not etcd');
    }
  }
}

function checkModelsVolume(renderName, objects, base) {
  const pvc = objects.find((o) => o.kind === 'PersistentVolumeClaim');
  const claims = new Set(base.flatMap((o) => (o.spec?.template?.spec?.volumes ?? [])
    .map((v) => v.persistentVolumeClaim?.claimName).filter(Boolean)));
  if (!pvc) return fail(renderName, 'no PersistentVolumeClaim');
  for (const claim of claims) {
    if (claim !== pvc.metadata.name) {
      fail(renderName, `the base mounts claim ${claim}, which is not ${pvc.metadata.name}`);
    }
  }
}

// The GPU component on top of the external-etcd overlay, from a scratch kustomization (its
// paths must be relative: kustomize refuses absolute ones).
function composedDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'scd-k8s-'));
  const rel = (p) => path.relative(dir, path.join(k8s, p));
  fs.writeFileSync(path.join(dir, 'kustomization.yaml'),
                   ['apiVersion: kustomize.config.k8s.io/v1beta1', 'kind: Kustomization',
                    'resources:', `  - ${rel('overlays/external-etcd')}`,
                    'components:', `  - ${rel('components/gpu')}`, ''].join('\n'));
  return dir;
}

// Renders `dir`, validates every object against its schema, then runs `check` on them.
const counts = [];
async function run(name, dir, check) {
  try {
    const objects = render(dir);
    await validateSchemas(name, objects);
    check(objects);
    counts.push(`${name} (${objects.length} objects)`);
    return objects;
  } catch (e) {
    fail(name, e.message);
    return [];
  }
}

checkConfigFiles();
const overlay = (name) => path.join(k8s, 'overlays', name);
const base = await run('deploy/k8s', k8s, (o) => checkRender('deploy/k8s', o));
await run('overlays/gpu', overlay('gpu'), (o) => checkRender('overlays/gpu', o, { gpu: true }));
await run('overlays/external-etcd', overlay('external-etcd'),
          (o) => checkRender('overlays/external-etcd', o, { externalEtcd: true }));
const composed = composedDir();
try {
  const name = 'overlays/external-etcd + components/gpu';
  await run(name, composed, (o) => checkRender(name, o, { gpu: true, externalEtcd: true }));
} finally {
  fs.rmSync(composed, { recursive: true, force: true });
}
await run('models', path.join(k8s, 'models'), (o) => checkModelsVolume('models', o, base));

if (failures.length) {
  console.log(`FAILED: ${failures.length} problem(s) in deploy/k8s:`);
  for (const f of failures) console.log(`  ${f}`);
  process.exit(1);
}
console.log(`deploy/k8s: every object valid and every invariant holds in ${counts.join(', ')}`);
