/** Splitting a launcher's command line (run, compare): no dependency beyond the errors, so that
 * `run` starts its program before the rest of the CLI is loaded. */
import { UsageError } from '../errors.js';

/**
 * Splits `[options] [--] CMD ARGS…` for the commands that launch a program (run, compare):
 * options end at `--` or at the first word that is not an option. `flags` take no value;
 * `values` take one (`--name value` or `--name=value`). Returns 'help' for -h/--help.
 */
export function splitCommandLine(
  command: string,
  argv: string[],
  flags: ReadonlySet<string>,
  values: ReadonlySet<string>,
): { options: Array<[name: string, value: string | true]>; rest: string[] } | 'help' {
  const options: Array<[string, string | true]> = [];
  let i = 0;
  for (; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') {
      i++;
      break;
    }
    if (arg === '-h' || arg === '--help') return 'help';
    if (!arg.startsWith('-')) break; // the command starts here
    const eq = arg.indexOf('=');
    const [name, inline] = arg.startsWith('--') && eq > 0 ? [arg.slice(0, eq), arg.slice(eq + 1)] : [arg, undefined];
    if (flags.has(name)) {
      options.push([name, true]);
      continue;
    }
    if (!values.has(name)) throw new UsageError(`${command}: unknown option ${name} (see mimalloc-pprof ${command} --help)`);
    const value = inline ?? argv[++i];
    if (value === undefined) throw new UsageError(`${command}: ${name} needs a value`);
    options.push([name, value]);
  }
  return { options, rest: argv.slice(i) };
}
