// `node --import tsx spice-login-cli.ts HOST PORT PASSWORD`: one SPICE login, for a test that
// runs it inside another network namespace (nsenter); prints {"result": N}.
import { spiceLogin } from './spice-login.js';

const [host, port, password] = process.argv.slice(2);
const session = await spiceLogin(Number(port), password ?? '', host);
session.close();
console.log(JSON.stringify({ result: session.result }));
