/** Finding the program to launch under the preload, and whether the preload can reach it. */
import { closeSync, existsSync, openSync, readSync, realpathSync, statSync } from 'node:fs';
import { basename, delimiter, join, resolve } from 'node:path';

/** PATH lookup, as execvp does. */
export function which(cmd: string, env: Record<string, string | undefined> = process.env): string | undefined {
  if (cmd.includes('/')) return existsSync(cmd) && statSync(cmd).isFile() ? resolve(cmd) : undefined;
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    const candidate = join(dir || '.', cmd);
    try {
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      /* next */
    }
  }
  return undefined;
}

/** The first `bytes` bytes of a file (fewer when it is shorter). */
function readHead(file: string, bytes: number): Buffer {
  const head = Buffer.alloc(bytes);
  const fd = openSync(file, 'r');
  try {
    return head.subarray(0, readSync(fd, head, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/** Why LD_PRELOAD cannot reach this file's allocator (static or setuid), if it cannot. */
export function preloadObstacle(file: string): string | undefined {
  try {
    const st = statSync(file);
    if (st.mode & 0o6000) return `${file} is setuid/setgid: the dynamic loader ignores LD_PRELOAD for it`;
    const head = readHead(file, 4096);
    const got = head.length;
    if (got < 64 || head.readUInt32BE(0) !== 0x7f454c46) return undefined; // a script: its interpreter decides
    const phoff = Number(head.readBigUInt64LE(0x20));
    const phentsize = head.readUInt16LE(0x36);
    const phnum = head.readUInt16LE(0x38);
    for (let k = 0; k < phnum && phoff + (k + 1) * phentsize <= got; k++) {
      if (head.readUInt32LE(phoff + k * phentsize) === 3) return undefined; // PT_INTERP: dynamic
    }
    return `${file} is statically linked: LD_PRELOAD cannot change its allocator`;
  } catch {
    return undefined;
  }
}

/**
 * Whether the program is Node: the node binary (under any name that starts with `node`), or a
 * script whose `#!` line runs node (npx, npm, tsc and most CLI tools).
 */
export function isNodeProgram(file: string): boolean {
  try {
    const real = realpathSync(file);
    if (/^node(js)?[\d.-]*$/.test(basename(real))) return true;
    const first = readHead(real, 256).toString('latin1').split('\n')[0] ?? '';
    return first.startsWith('#!') && /\bnode(js)?\b/.test(first);
  } catch {
    return false;
  }
}

/**
 * The Deno executable behind `file`, when it is Deno: the binary itself, or the npm package's
 * launcher (node_modules/deno/bin.cjs, which spawns the binary beside it).
 */
export function denoExecutable(file: string): string | undefined {
  try {
    const real = realpathSync(file);
    if (basename(real) === 'deno') return real;
    if (basename(real) === 'bin.cjs' && basename(join(real, '..')) === 'deno') {
      // beside it once its install script ran; else in the platform package it copies from
      for (const binary of [join(real, '..', 'deno'), join(real, '..', '..', '@deno', `linux-${process.arch}-glibc`, 'deno')]) {
        if (existsSync(binary)) return realpathSync(binary);
      }
    }
  } catch {
    /* not found: not Deno */
  }
  return undefined;
}
