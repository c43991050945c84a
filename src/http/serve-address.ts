/** `run --serve`'s address, parsed without loading the HTTP service. */
/** `[HOST:]PORT` (an IPv6 host in brackets: `[::1]:6060`), or a message saying what is wrong. */
export function parseServeAddress(spec: string): { host: string; port: number } | string {
  const m = /^(?:(\[[0-9a-fA-F:.]+\]|[^:[\]]+):)?(\d{1,5})$/.exec(spec);
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) return `--serve takes [HOST:]PORT like 6060, 127.0.0.1:6060 or [::1]:6060, not ${spec}`;
  const host = m[1] === undefined ? '127.0.0.1' : m[1].replace(/^\[(.*)\]$/, '$1');
  return { host, port };
}

