/**
 * A runner config field that names something missing (a template, a CD image): the VM cannot
 * run until the user changes the field, so the runner reports it as such, with the field's path.
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  constructor(
    /** The field's path in the runner config, e.g. `template` or `vm.drives[1].file`. */
    readonly field: string,
    message: string,
  ) {
    super(message);
  }
}
