// `node --import tsx spice-login-cli.ts PORT PASSWORD`: one SPICE login on 127.0.0.1, for a
// test that runs it inside another network namespace (nsenter); prints {"result": N}.
import { spiceLogin } from './spice-login.js';

const [port, password] = process.argv.slice(2);
const session = await spiceLogin(Number(port), password ?? '');
session.close();
console.log(JSON.stringify({ result: session.result }));
